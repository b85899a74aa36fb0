package connect_test

import (
	"strings"
	"testing"

	"github.com/tetherhq/tether/services/platform/connect"
)

// Passwords in URLs never reach a log, an error or a banner.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                               "nats://127.0.0.1:4222",
		"nats://user:s3cret@10.0.0.1:4222":                    "nats://user:xxxxx@10.0.0.1:4222",
		"nats://a:p1@n1:4222,nats://b:p2@n2:4222":             "nats://a:xxxxx@n1:4222,nats://b:xxxxx@n2:4222",
		"postgres://tether:pw@db:5432/tether?sslmode=disable": "postgres://tether:xxxxx@db:5432/tether?sslmode=disable",
		"not a url": "not a url",
	} {
		if got := connect.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// A NATS connection that fails says where it tried, without the password.
func TestNATSErrorHasNoPassword(t *testing.T) {
	_, _, err := connect.NATS("nats://tether:s3cret-pw@127.0.0.1:1", connect.NATSOptions{})
	if err == nil {
		t.Fatal("connected to port 1")
	}
	if strings.Contains(err.Error(), "s3cret-pw") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("error %q: want the address without the password", err)
	}
}
