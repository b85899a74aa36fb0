package events

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidName marks a malformed resource name or id.
var ErrInvalidName = errors.New("events: invalid resource name")

// IDRule is AIP-122's resource id rule, as a regular expression; it also
// makes ids safe NATS subject tokens. ValidID checks it without one: the
// controller checks every live server's name on each pass.
const IDRule = `^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`

// ValidID reports whether id is a valid resource id (IDRule): lowercase
// letters, digits and dashes, starting with a letter, not ending with a
// dash, at most 63 characters.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 63 || id[0] < 'a' || id[0] > 'z' || id[len(id)-1] == '-' {
		return false
	}
	for i := 1; i < len(id); i++ {
		c := id[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// CheckID returns an error naming what is wrong with id, or nil.
func CheckID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: id is empty", ErrInvalidName)
	}
	if !ValidID(id) {
		return fmt.Errorf("%w: id %q must match %s", ErrInvalidName, id, IDRule)
	}
	return nil
}

// Resource collections, the first segment of each resource name.
const (
	fleetsCollection       = "fleets"
	gameServersCollection  = "gameServers"
	hostsCollection        = "hosts"
	gameSessionsCollection = "gameSessions"
	playerSessionsSegment  = "playerSessions"
)

// StandaloneFleet is the reserved fleet id under which game servers that
// belong to no fleet are named ("fleets/standalone/gameServers/{id}"): no
// fleet of that id can be created, nothing replaces them, and a failed one
// stays UNHEALTHY until it is deleted.
const StandaloneFleet = "standalone"

// FleetName returns "fleets/{id}".
func FleetName(id string) string { return fleetsCollection + "/" + id }

// HostName returns "hosts/{id}".
func HostName(id string) string { return hostsCollection + "/" + id }

// GameServerName returns "fleets/{fleet}/gameServers/{id}".
func GameServerName(fleet, id string) string {
	return fleetsCollection + "/" + fleet + "/" + gameServersCollection + "/" + id
}

// ParseFleetName returns the fleet id of "fleets/{fleet}".
func ParseFleetName(name string) (string, error) {
	return parseSingle(name, fleetsCollection)
}

// ParseHostName returns the host id of "hosts/{host}".
func ParseHostName(name string) (string, error) {
	return parseSingle(name, hostsCollection)
}

// ParseGameServerName returns the fleet and game server ids of
// "fleets/{fleet}/gameServers/{game_server}".
func ParseGameServerName(name string) (fleet, id string, err error) {
	rest, ok := strings.CutPrefix(name, fleetsCollection+"/")
	fleet, rest, ok2 := strings.Cut(rest, "/")
	id, ok3 := strings.CutPrefix(rest, gameServersCollection+"/")
	if !ok || !ok2 || !ok3 || strings.Contains(id, "/") {
		return "", "", fmt.Errorf("%w: %q is not fleets/{fleet}/gameServers/{game_server}", ErrInvalidName, name)
	}
	if err := CheckID(fleet); err != nil {
		return "", "", err
	}
	if err := CheckID(id); err != nil {
		return "", "", err
	}
	return fleet, id, nil
}

// GameServerFleetName returns the name of a game server's fleet,
// "fleets/{fleet}", as the start of the game server's name (nothing is
// allocated: a pass over 100,000 servers groups them by it), checked as
// ParseGameServerName checks it.
func GameServerFleetName(name string) (string, error) {
	fleet, _, err := ParseGameServerName(name)
	if err != nil {
		return "", err
	}
	return name[:len(fleetsCollection)+1+len(fleet)], nil
}

func parseSingle(name, collection string) (string, error) {
	id, ok := strings.CutPrefix(name, collection+"/")
	if !ok || strings.Contains(id, "/") {
		return "", fmt.Errorf("%w: %q is not %s/{id}", ErrInvalidName, name, collection)
	}
	return id, CheckID(id)
}

// idAlphabet is lowercase base32 without look-alike characters.
const idAlphabet = "abcdefghjkmnpqrstuvwxyz23456789"

// NewID returns a random id with a kind prefix, e.g. NewID("gs") = "gs-7f3k2q9a".
func NewID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error on supported platforms.
	out := make([]byte, len(b))
	for i, v := range b {
		out[i] = idAlphabet[int(v)%len(idAlphabet)]
	}
	return prefix + "-" + string(out)
}
