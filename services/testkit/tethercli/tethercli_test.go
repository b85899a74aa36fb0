package tethercli_test

import (
	"testing"

	"github.com/tetherhq/tether/services/testkit/tethercli"
)

func TestReadTetherCLI(t *testing.T) {
	cli := tethercli.Read(t, "../../cmd/tether")
	for _, cmd := range []string{"migrate", "apiserver", "projector", "controller", "agent", "dev"} {
		if _, ok := cli.Flags[cmd]; !ok {
			t.Errorf("subcommand %q not found; found %v", cmd, cli.Flags)
		}
	}
	for _, tc := range []struct{ cmd, flag string }{
		{"apiserver", "grpc-addr"}, {"apiserver", "player-token-keys"}, {"migrate", "stream-replicas"},
		{"agent", "host-id"}, {"projector", "id"}, {"controller", "admin-addr"}, {"agent", "nats-url"},
	} {
		if !cli.HasFlag(tc.cmd, tc.flag) {
			t.Errorf("tether %s --%s not found", tc.cmd, tc.flag)
		}
	}
	if cli.HasFlag("migrate", "grpc-addr") {
		t.Error("migrate has --grpc-addr: flags leak between commands")
	}
}
