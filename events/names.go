package events

import (
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrInvalidName marks a malformed resource name or id.
var ErrInvalidName = errors.New("events: invalid resource name")

// idPattern is AIP-122's resource id rule; it also makes ids safe NATS
// subject tokens.
var idPattern = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidID reports whether id is a valid resource id: lowercase letters,
// digits and dashes, starting with a letter, at most 63 characters.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// CheckID returns an error naming what is wrong with id, or nil.
func CheckID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: id is empty", ErrInvalidName)
	}
	if !ValidID(id) {
		return fmt.Errorf("%w: id %q must match %s", ErrInvalidName, id, idPattern)
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
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != fleetsCollection || parts[2] != gameServersCollection {
		return "", "", fmt.Errorf("%w: %q is not fleets/{fleet}/gameServers/{game_server}", ErrInvalidName, name)
	}
	if err := CheckID(parts[1]); err != nil {
		return "", "", err
	}
	if err := CheckID(parts[3]); err != nil {
		return "", "", err
	}
	return parts[1], parts[3], nil
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
