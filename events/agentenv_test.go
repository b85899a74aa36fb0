package events_test

import (
	"testing"

	"github.com/tetherhq/tether/events"
)

// The agent's variables are the names it sets for every game server, and
// no others; an argument names the token however os.Expand reads it.
func TestAgentVariablesAndArgumentsNamingTheToken(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"TETHER_GAMESERVER", true},
		{"TETHER_GAMESERVER_TOKEN", true},
		{"TETHER_GAMESERVER_TOKEN_FD", true},
		{"TETHER_SDK_ADDR", true},
		{"TETHER_SDK_HTTP", true},
		{"TETHER_PORT_GAME", true},
		{"AGONES_SDK_GRPC_PORT", true},
		{"AGONES_SDK_HTTP_PORT", true},
		{"AGONES_SDK_GRPC_HOST", true},
		{"AGONES_SDK", false},
		{"TETHER_EXAMPLE_LISTEN_HOST", false},
		{"TETHER_GAMESERVERS", false},
		{"tether_gameserver_token", false},
		{"MODE", false},
	} {
		if got := events.AgentVariable(tc.name); got != tc.want {
			t.Errorf("AgentVariable(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		arg  string
		want bool
	}{
		{"${TETHER_GAMESERVER_TOKEN}", true},
		{"--token=$TETHER_GAMESERVER_TOKEN", true},
		{"a${TETHER_GAMESERVER_TOKEN}b", true},
		{"${TETHER_GAMESERVER_TOKEN_FD}", false},
		{"$TETHER_GAMESERVER_TOKEN_FD", false},
		{"${TETHER_PORT_GAME}", false},
		{"TETHER_GAMESERVER_TOKEN", false},
	} {
		if got := events.NamesToken(tc.arg); got != tc.want {
			t.Errorf("NamesToken(%q) = %v, want %v", tc.arg, got, tc.want)
		}
	}
}
