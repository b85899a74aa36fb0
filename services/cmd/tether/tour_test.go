package main

import (
	"strings"
	"testing"

	"github.com/tetherhq/tether/services/dev"
)

// The banner's commands work wherever the stack listens: tetherctl finds
// it by itself, and the line for curl sets the REST address the stack
// has, not the default port (which may have been taken).
func TestTourCarriesTheStacksAddresses(t *testing.T) {
	a := dev.Addresses{REST: "http://127.0.0.1:41234", GRPC: "127.0.0.1:41233", DataDir: "/tmp/tether-dev"}
	out := tour(a, true)
	for _, want := range []string{
		"  bin/tetherctl fleets list ",
		`  REST=http://127.0.0.1:41234 KEY="Authorization: Bearer $(cat /tmp/tether-dev/keys/admin.key)"`,
		`curl -s -H "$KEY" $REST/v1/fleets/-/gameServers`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the tour lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "7080") || strings.Contains(out, "7070") {
		t.Errorf("the tour names a default port:\n%s", out)
	}
}
