package main

import (
	"fmt"
	"strings"
)

// Resource collections of the API's names.
const (
	fleetsPrefix      = "fleets/"
	hostsPrefix       = "hosts/"
	gameServersInfix  = "/gameServers/"
	allFleetsParent   = "fleets/-"
	gameServerFormats = `FLEET/GAMESERVER or fleets/FLEET/gameServers/GAMESERVER`
)

// fleetName accepts "arena" or "fleets/arena" and returns "fleets/arena".
func fleetName(s string) string {
	if strings.HasPrefix(s, fleetsPrefix) {
		return s
	}
	return fleetsPrefix + s
}

// fleetID returns "arena" for "arena" or "fleets/arena".
func fleetID(s string) string { return strings.TrimPrefix(s, fleetsPrefix) }

// hostName accepts "h1" or "hosts/h1" and returns "hosts/h1".
func hostName(s string) string {
	if strings.HasPrefix(s, hostsPrefix) {
		return s
	}
	return hostsPrefix + s
}

// gameServerName accepts "fleets/arena/gameServers/gs-1" or the short form
// "arena/gs-1" and returns the full name.
func gameServerName(s string) (string, error) {
	if strings.HasPrefix(s, fleetsPrefix) {
		return s, nil
	}
	fleet, gs, ok := strings.Cut(s, "/")
	if !ok || fleet == "" || gs == "" || strings.Contains(gs, "/") {
		return "", fmt.Errorf("game server name %q: want %s", s, gameServerFormats)
	}
	return fleetsPrefix + fleet + gameServersInfix + gs, nil
}

// shortName renders a resource name the way the commands accept it short:
// "arena", "arena/gs-1", "h1". Names of another shape are kept.
func shortName(name string) string {
	if rest, ok := strings.CutPrefix(name, fleetsPrefix); ok {
		if fleet, gs, ok := strings.Cut(rest, gameServersInfix); ok {
			return fleet + "/" + gs
		}
		return rest
	}
	if rest, ok := strings.CutPrefix(name, hostsPrefix); ok {
		return rest
	}
	return name
}
