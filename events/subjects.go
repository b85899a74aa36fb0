package events

import (
	"fmt"
	"strings"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// StreamName is the JetStream stream holding every event.
const StreamName = "TETHER_EVENTS"

// SubjectPrefix starts every event subject; the stream captures
// SubjectPrefix + ".>".
const SubjectPrefix = "tether.ev"

// Aggregate kinds: the subject token after SubjectPrefix.
const (
	KindFleet         = "fleet"
	KindHost          = "host"
	KindGameServer    = "gs"
	KindGameSession   = "gsess"
	KindPlayerSession = "ps"
)

// Subject returns the stream subject of an aggregate instance from its
// resource name: "fleets/arena" → "tether.ev.fleet.arena",
// "fleets/arena/gameServers/gs-1" → "tether.ev.gs.arena.gs-1".
//
// A game server's subject depends on where it runs: one placed on a host
// whose agent writes host subjects has its events on
// GameServerSubject(name, host) instead, so that NATS lets only that
// host's credentials publish there. Subject gives the subject of servers
// placed before host subjects; SubjectOf gives a server's own from its
// state.
func Subject(name string) (string, error) {
	parts := strings.Split(name, "/")
	for i := 1; i < len(parts); i += 2 {
		if err := CheckID(parts[i]); err != nil {
			return "", fmt.Errorf("%q: %w", name, err)
		}
	}
	switch {
	case len(parts) == 2 && parts[0] == fleetsCollection:
		return SubjectPrefix + "." + KindFleet + "." + parts[1], nil
	case len(parts) == 2 && parts[0] == hostsCollection:
		return SubjectPrefix + "." + KindHost + "." + parts[1], nil
	case len(parts) == 4 && parts[0] == fleetsCollection && parts[2] == gameServersCollection:
		return SubjectPrefix + "." + KindGameServer + "." + parts[1] + "." + parts[3], nil
	case len(parts) == 2 && parts[0] == gameSessionsCollection:
		return SubjectPrefix + "." + KindGameSession + "." + parts[1], nil
	case len(parts) == 4 && parts[0] == gameSessionsCollection && parts[2] == playerSessionsSegment:
		return SubjectPrefix + "." + KindPlayerSession + "." + parts[1] + "." + parts[3], nil
	}
	return "", fmt.Errorf("%w: %q names no event-sourced resource", ErrInvalidName, name)
}

// MustSubject is Subject for names built by this package's constructors; it
// panics on a malformed name, which is a programming error.
func MustSubject(name string) string {
	s, err := Subject(name)
	if err != nil {
		panic(err)
	}
	return s
}

// GameServerSubject returns the host subject of game server name placed on
// host (a host resource name): "fleets/arena/gameServers/gs-1" on
// "hosts/h1" → "tether.ev.gs.arena.gs-1.h1". A host agent's NATS
// credentials publish on its own host's token only
// (tether.ev.gs.*.*.<host>), so one host cannot write, or poison, another
// host's servers.
func GameServerSubject(name, host string) (string, error) {
	fleet, id, err := ParseGameServerName(name)
	if err != nil {
		return "", err
	}
	hostID, err := ParseHostName(host)
	if err != nil {
		return "", err
	}
	return SubjectPrefix + "." + KindGameServer + "." + fleet + "." + id + "." + hostID, nil
}

// GameServerHostSubjects returns the wildcard matching the host subjects
// of game server name on every host (name must be valid).
func GameServerHostSubjects(name string) string {
	fleet, id, _ := ParseGameServerName(name)
	return SubjectPrefix + "." + KindGameServer + "." + fleet + "." + id + ".*"
}

// HostGameServersSubject returns the wildcard matching the host subjects
// of every game server placed on host (a host resource name, whose id is
// checked by the caller): what its agent may publish game server events on.
func HostGameServersSubject(hostID string) string {
	return SubjectPrefix + "." + KindGameServer + ".*.*." + hostID
}

// SubjectOf returns the subject of a game server's events from its state:
// its host subject when it was placed on one (GameServerScheduled.host_subject),
// else Subject of its name. A state without a name (none yet) has none.
func SubjectOf(state *eventsv1.GameServerState) (string, error) {
	if state.GetHostSubject() {
		return GameServerSubject(state.GetName(), state.GetHost())
	}
	return Subject(state.GetName())
}

// SubjectHost returns the host resource name a game server's host subject
// names, and ok=false for any other subject.
func SubjectHost(subject string) (host string, ok bool) {
	rest, found := strings.CutPrefix(subject, SubjectPrefix+"."+KindGameServer+".")
	if !found {
		return "", false
	}
	t := strings.Split(rest, ".")
	if len(t) != 3 || CheckID(t[2]) != nil {
		return "", false
	}
	return HostName(t[2]), true
}

// NameFromSubject is the inverse of Subject and of GameServerSubject.
func NameFromSubject(subject string) (string, error) {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix+".")
	if !ok {
		return "", fmt.Errorf("%w: subject %q is not under %s", ErrInvalidName, subject, SubjectPrefix)
	}
	t := strings.Split(rest, ".")
	var name string
	switch {
	case len(t) == 2 && t[0] == KindFleet:
		name = FleetName(t[1])
	case len(t) == 2 && t[0] == KindHost:
		name = HostName(t[1])
	case len(t) == 3 && t[0] == KindGameServer:
		name = GameServerName(t[1], t[2])
	case len(t) == 4 && t[0] == KindGameServer:
		name = GameServerName(t[1], t[2])
		s, err := GameServerSubject(name, HostName(t[3]))
		if err != nil {
			return "", err
		}
		if s != subject {
			return "", fmt.Errorf("%w: subject %q is not the subject of %q", ErrInvalidName, subject, name)
		}
		return name, nil
	case len(t) == 2 && t[0] == KindGameSession:
		name = gameSessionsCollection + "/" + t[1]
	case len(t) == 3 && t[0] == KindPlayerSession:
		name = gameSessionsCollection + "/" + t[1] + "/" + playerSessionsSegment + "/" + t[2]
	default:
		return "", fmt.Errorf("%w: subject %q names no aggregate", ErrInvalidName, subject)
	}
	// A token may hold a '/' ("fleet.a/gameServers/b"), which builds another
	// kind's name; only a name whose own subject is this one is the inverse.
	s, err := Subject(name)
	if err != nil {
		return "", err
	}
	if s != subject {
		return "", fmt.Errorf("%w: subject %q is not the subject of %q", ErrInvalidName, subject, name)
	}
	return name, nil
}

// FleetGameServersSubject returns the wildcard matching every game server
// of a fleet, on host subjects and on the subjects of servers placed before
// them.
func FleetGameServersSubject(fleet string) string {
	return SubjectPrefix + "." + KindGameServer + "." + fleet + ".>"
}

// SessionSubjects returns the wildcards matching every game session's and
// every player session's subject.
func SessionSubjects() []string {
	return []string{SubjectPrefix + "." + KindGameSession + ".*", SubjectPrefix + "." + KindPlayerSession + ".*.*"}
}
