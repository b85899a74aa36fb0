package sdk

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Environment variables the agent sets for every game server process it
// launches.
const (
	// EnvGameServer holds the server's resource name,
	// "fleets/{fleet}/gameServers/{game_server}".
	EnvGameServer = "TETHER_GAMESERVER"
	// EnvTokenFD names the file descriptor (3) on which the agent hands
	// the process the token that identifies it: a pipe that holds the
	// token, then a newline, and then ends. It is read once: Token reads
	// it, closes it and keeps the token for the process's later calls. An
	// agent gives the token this way rather than in the environment, which
	// other processes of the same user can read (/proc/PID/environ).
	EnvTokenFD = "TETHER_GAMESERVER_TOKEN_FD"
	// EnvToken holds the token that identifies the process to the agent,
	// as agents before EnvTokenFD gave it.
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
// $TETHER_SDK_ADDR and Token as Token returns it (empty if it cannot be
// read; Connect says why), the other fields zero (Connect gives them their
// defaults).
func FromEnv() Options {
	token, _ := Token()
	return Options{Addr: os.Getenv(EnvSDKAddr), Token: token}
}

// Token returns the token that identifies the process to the agent: read
// from the descriptor $TETHER_GAMESERVER_TOKEN_FD names, the first time
// (the descriptor is then closed and the variable unset, and later calls
// return the same token), or else, as an earlier agent gives it, from
// $TETHER_GAMESERVER_TOKEN. It returns "" and no error if neither is set,
// and an error if the descriptor cannot be read and the variable is not
// set either.
func Token() (string, error) {
	token, err := pipedToken()
	if err == nil {
		return token, nil
	}
	if v := os.Getenv(EnvToken); v != "" {
		return v, nil
	}
	if errors.Is(err, errNoTokenFD) {
		return "", nil
	}
	return "", err
}

// errNoTokenFD says that $TETHER_GAMESERVER_TOKEN_FD is not set.
var errNoTokenFD = errors.New("sdk: $" + EnvTokenFD + " is not set")

// maxTokenBytes bounds what is read from the token descriptor.
const maxTokenBytes = 4096

// pipedToken reads the token from its descriptor once per process: the
// pipe holds it once, and the descriptor is closed after. It is package
// state because the descriptor is the process's, read by whichever part
// of the game server connects first.
var pipedToken = sync.OnceValues(func() (string, error) {
	v := os.Getenv(EnvTokenFD)
	if v == "" {
		return "", errNoTokenFD
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd <= 2 {
		return "", fmt.Errorf("sdk: $%s=%q is not a file descriptor above 2", EnvTokenFD, v)
	}
	f, err := openTokenPipe(fd)
	if err != nil {
		return "", fmt.Errorf("sdk: the token's descriptor %d ($%s): %w", fd, EnvTokenFD, err)
	}
	defer f.Close()
	// Up to the newline: a pipe whose writer stays open would never end.
	line, err := bufio.NewReader(io.LimitReader(f, maxTokenBytes)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("sdk: read the token from descriptor %d ($%s): %w", fd, EnvTokenFD, err)
	}
	// The descriptor is closed: a child of the process must not take
	// whatever later gets its number for the token's pipe.
	_ = os.Unsetenv(EnvTokenFD) // it fails only for an invalid name
	token := strings.TrimSpace(line)
	if token == "" {
		return "", fmt.Errorf("sdk: descriptor %d ($%s) held no token: read by something else first?", fd, EnvTokenFD)
	}
	return token, nil
})

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
