package events

import (
	"os"
	"strings"
)

// TokenVariable names a game server's SDK token in the environment the
// agent builds for its process. The agent hands the token over on a
// descriptor instead (agent.EnvTokenFD), and never expands it into the
// process's arguments, which ps shows to every user of the host.
const TokenVariable = "TETHER_GAMESERVER_TOKEN"

// agentVariable and agentVariablePrefixes are the names the agent sets in
// every game server's environment: its name, its token (and the
// descriptor it comes on), the SDK's addresses (Tether's and Agones') and
// one variable per port.
const agentVariable = "TETHER_GAMESERVER"

var agentVariablePrefixes = []string{"TETHER_GAMESERVER_", "TETHER_SDK_", "TETHER_PORT_", "AGONES_SDK_"}

// AgentVariable reports whether name is a variable the agent sets for a
// game server: TETHER_GAMESERVER, or a name that starts with
// TETHER_GAMESERVER_, TETHER_SDK_, TETHER_PORT_ or AGONES_SDK_. A template
// may not set one: its TETHER_GAMESERVER_TOKEN replaced the token the agent
// hands over, and its AGONES_SDK_GRPC_PORT would point an Agones server at
// ports that are not its own.
func AgentVariable(name string) bool {
	if name == agentVariable {
		return true
	}
	for _, p := range agentVariablePrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// NamesToken reports whether a template argument refers to the SDK token
// ($TETHER_GAMESERVER_TOKEN or ${TETHER_GAMESERVER_TOKEN}, as os.Expand,
// which the agent expands arguments with, reads it).
func NamesToken(arg string) bool {
	found := false
	os.Expand(arg, func(name string) string {
		found = found || name == TokenVariable
		return ""
	})
	return found
}
