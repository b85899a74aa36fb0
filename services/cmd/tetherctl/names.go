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
	gameServerFormats = `GAMESERVER (an id no other fleet has), FLEET/GAMESERVER or fleets/FLEET/gameServers/GAMESERVER`

	gameSessionsPrefix   = "gameSessions/"
	playerSessionsInfix  = "/playerSessions/"
	gameSessionFormats   = `GAMESESSION or gameSessions/GAMESESSION`
	playerSessionFormats = `GAMESESSION/PLAYERSESSION or gameSessions/GAMESESSION/playerSessions/PLAYERSESSION`
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

// gameServerName accepts "fleets/arena/gameServers/gs-1", the short form
// "arena/gs-1", or an id alone, "gs-1", and returns the full name; an id
// alone gives "fleets/-/gameServers/gs-1" (any fleet), which
// client.resolveGameServer turns into the one server's name.
func gameServerName(s string) (string, error) {
	if strings.HasPrefix(s, fleetsPrefix) {
		return s, nil
	}
	if s != "" && !strings.Contains(s, "/") {
		return allFleetsParent + gameServersInfix + s, nil
	}
	fleet, gs, ok := strings.Cut(s, "/")
	if !ok || fleet == "" || gs == "" || strings.Contains(gs, "/") {
		return "", fmt.Errorf("game server name %q: want %s", s, gameServerFormats)
	}
	return fleetsPrefix + fleet + gameServersInfix + gs, nil
}

// gameSessionName accepts "gsess-1" or "gameSessions/gsess-1" and returns
// the full name.
func gameSessionName(s string) (string, error) {
	id := strings.TrimPrefix(s, gameSessionsPrefix)
	if id == "" || strings.Contains(id, "/") {
		return "", fmt.Errorf("game session name %q: want %s", s, gameSessionFormats)
	}
	return gameSessionsPrefix + id, nil
}

// playerSessionName accepts
// "gameSessions/gsess-1/playerSessions/ps-1" or the short form
// "gsess-1/ps-1" and returns the full name.
func playerSessionName(s string) (string, error) {
	if rest, ok := strings.CutPrefix(s, gameSessionsPrefix); ok {
		gsess, ps, ok := strings.Cut(rest, playerSessionsInfix)
		if !ok || gsess == "" || ps == "" || strings.Contains(gsess, "/") || strings.Contains(ps, "/") {
			return "", fmt.Errorf("player session name %q: want %s", s, playerSessionFormats)
		}
		return s, nil
	}
	gsess, ps, ok := strings.Cut(s, "/")
	if !ok || gsess == "" || ps == "" || strings.Contains(ps, "/") {
		return "", fmt.Errorf("player session name %q: want %s", s, playerSessionFormats)
	}
	return gameSessionsPrefix + gsess + playerSessionsInfix + ps, nil
}

// shortName renders a resource name the way the commands accept it short:
// "arena", "arena/gs-1", "h1", "gsess-1", "gsess-1/ps-1". Names of another
// shape are kept.
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
	if rest, ok := strings.CutPrefix(name, gameSessionsPrefix); ok {
		if gsess, ps, ok := strings.Cut(rest, playerSessionsInfix); ok {
			return gsess + "/" + ps
		}
		return rest
	}
	return name
}
