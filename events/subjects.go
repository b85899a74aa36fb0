package events

import (
	"fmt"
	"strings"
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

// NameFromSubject is the inverse of Subject.
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

// FleetGameServersSubject returns the wildcard matching every game server of a fleet.
func FleetGameServersSubject(fleet string) string {
	return SubjectPrefix + "." + KindGameServer + "." + fleet + ".*"
}

// SessionSubjects returns the wildcards matching every game session's and
// every player session's subject.
func SessionSubjects() []string {
	return []string{SubjectPrefix + "." + KindGameSession + ".*", SubjectPrefix + "." + KindPlayerSession + ".*.*"}
}
