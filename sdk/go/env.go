package sdk

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Environment variables the agent sets for every game server process it
// launches.
const (
	// EnvGameServer holds the server's resource name,
	// "fleets/{fleet}/gameServers/{game_server}".
	EnvGameServer = "TETHER_GAMESERVER"
	// EnvToken holds the token that identifies the process to the agent.
	EnvToken = "TETHER_GAMESERVER_TOKEN"
	// EnvSDKAddr holds the agent's gRPC SDK address, host:port, plaintext.
	EnvSDKAddr = "TETHER_SDK_ADDR"
	// EnvSDKHTTP holds the base URL of the agent's REST SDK, e.g.
	// http://127.0.0.1:7101.
	EnvSDKHTTP = "TETHER_SDK_HTTP"
	// EnvPortPrefix starts the variable of each port: TETHER_PORT_GAME for
	// the port named "game" (see PortEnv).
	EnvPortPrefix = "TETHER_PORT_"
)

// FromEnv returns the Options the environment gives: Addr from
// $TETHER_SDK_ADDR and Token from $TETHER_GAMESERVER_TOKEN, the other
// fields zero (Connect gives them their defaults).
func FromEnv() Options {
	return Options{Addr: os.Getenv(EnvSDKAddr), Token: os.Getenv(EnvToken)}
}

// GameServerName returns the server's resource name from
// $TETHER_GAMESERVER, or "" outside a process the agent launched.
func GameServerName() string { return os.Getenv(EnvGameServer) }

// PortEnv returns the environment variable that holds the port named name
// in the fleet template: upper case, dashes as underscores, after
// EnvPortPrefix ("game-udp" → "TETHER_PORT_GAME_UDP").
func PortEnv(name string) string {
	return EnvPortPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Port returns the number of the port named name in the fleet template,
// from the environment.
func Port(name string) (int, error) {
	env := PortEnv(name)
	v, ok := os.LookupEnv(env)
	if !ok {
		return 0, fmt.Errorf("sdk: port %q: $%s is not set", name, env)
	}
	p, err := strconv.Atoi(v)
	if err != nil || p <= 0 || p > 65535 {
		return 0, fmt.Errorf("sdk: port %q: $%s=%q is not a port number", name, env, v)
	}
	return p, nil
}
