// Package natsauth gives every Tether component and every host agent a
// NATS identity of its own, with only the subjects it uses
// (docs/security.md): decentralized NATS auth, one operator, one account
// for Tether (JetStream enabled) and one user per principal, whose
// credentials file (.creds: a user JWT and its nkey seed) a component
// connects with. The same nkey signs the events the component appends
// (events/natsjs), and the signers file maps each public key to its
// principal, so readers know who wrote each event.
//
// What NATS refuses by subject: a host agent beats only its own heartbeat
// key, reads only its own commands, answers reads of its own host's game
// server logs only, writes only its own host's events, and cannot touch a
// stream's configuration; only the admin principal (`tether
// migrate`) may create, update or delete streams. Besides admin, only the
// controller may purge, and only the events stream: the archiver it runs
// while it leads purges the subjects it has archived (services/archiver);
// and only the projector may touch its durable consumer of the events
// stream (projectorConsumer).
// What the subjects
// cannot say (a host agent writes game-server events, and a game server's
// subject does not name its host), the signature says: the folds refuse a
// host agent's event on another host's game server (events.checkWriter).
package natsauth

import (
	"fmt"
	"strings"
	"time"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/nats/hostbeat"
	"github.com/tetherhq/tether/services/nats/hostlogs"
	"github.com/tetherhq/tether/services/nats/lease"
	"github.com/tetherhq/tether/services/nats/replicas"
)

// The control-plane principals. A host agent's principal is
// HostPrincipal(id).
const (
	// Admin sets up and changes streams and buckets (`tether migrate`) and
	// may do anything.
	Admin = "admin"
	// APIServer is the API (gRPC and REST).
	APIServer = "apiserver"
	// Controller is the controller.
	Controller = "controller"
	// Projector is the projector.
	Projector = "projector"
)

// Components lists the control-plane principals, in the order Init
// creates them.
func Components() []string { return []string{Admin, APIServer, Controller, Projector} }

// HostPrincipal returns the principal of the agent of host id: its host's
// resource name, "hosts/h1".
func HostPrincipal(id string) string { return events.HostName(id) }

// HostID returns the host id of a host agent's principal, ok=false for
// any other principal.
func HostID(principal string) (string, bool) {
	id, ok := strings.CutPrefix(principal, "hosts/")
	return id, ok && events.CheckID(id) == nil
}

// CheckPrincipal refuses a principal that is neither a component nor a
// host agent with a valid host id.
func CheckPrincipal(principal string) error {
	for _, c := range Components() {
		if principal == c {
			return nil
		}
	}
	if _, ok := HostID(principal); ok {
		return nil
	}
	return fmt.Errorf("natsauth: %q is no principal: one of %s, or hosts/ID", principal, strings.Join(Components(), ", "))
}

// InboxPrefix is the prefix of a principal's reply subjects: its
// permissions let it subscribe there only, so one host agent cannot read
// the replies (its commands, its reads) of another. It does not change
// when the principal's key is rotated.
func InboxPrefix(principal string) string {
	return "_INBOX." + strings.ReplaceAll(principal, "/", ".")
}

// Permissions are the subjects a principal may publish to (Publish, less
// PublishDeny) and subscribe to, and whether it answers requests.
type Permissions struct {
	Publish     []string
	PublishDeny []string
	Subscribe   []string
	// RespondWithin, when set, lets the principal answer each request it
	// receives, once, within this time, on the request's reply subject
	// (another principal's inbox, which Publish does not name): NATS's
	// response permission.
	RespondWithin time.Duration
}

// The JetStream API subjects, by the name of what they act on.
const (
	jsAPI       = "$JS.API."
	kvHosts     = "KV_" + hostbeat.Bucket
	projectorCn = "tether-projector" // the projector's durable consumer
)

// jsRead is what every control-plane component reads: stream and
// consumer information, single messages, and its consumers' deliveries.
var jsRead = []string{
	jsAPI + "INFO",
	jsAPI + "STREAM.INFO.*",
	jsAPI + "STREAM.NAMES",
	jsAPI + "STREAM.LIST",
	jsAPI + "STREAM.MSG.GET.*",
	jsAPI + "DIRECT.GET.*",
	jsAPI + "DIRECT.GET.*.>",
	jsAPI + "CONSUMER.INFO.*.*",
	jsAPI + "CONSUMER.NAMES.*",
	jsAPI + "CONSUMER.LIST.*",
	jsAPI + "CONSUMER.CREATE.>",
	jsAPI + "CONSUMER.DURABLE.CREATE.>",
	jsAPI + "CONSUMER.MSG.NEXT.*.*",
	jsAPI + "CONSUMER.DELETE.*.*",
	"$JS.ACK.>",
	"$JS.FC.>",
}

// eventSubjects is every event subject.
const eventSubjects = events.SubjectPrefix + ".>"

// PermissionsOf returns what principal may do.
func PermissionsOf(principal string) (Permissions, error) {
	if err := CheckPrincipal(principal); err != nil {
		return Permissions{}, err
	}
	p := Permissions{Subscribe: []string{InboxPrefix(principal) + ".>"}}
	switch principal {
	case Admin:
		return Permissions{Publish: []string{">"}, Subscribe: []string{">"}}, nil
	case APIServer:
		// Its key in the set of live API replicas (services/nats/replicas).
		p.Publish = append([]string{eventSubjects, commands.Subject("*"), hostlogs.Subject("*"), "$KV." + replicas.Bucket + ".*"}, jsRead...)
		p.PublishDeny = projectorConsumer()
	case Controller:
		// The archiver runs in the controller while it leads, and purges the
		// subjects it archived (services/archiver).
		p.Publish = append([]string{eventSubjects, commands.Subject("*"), "$KV." + lease.Bucket + ".*", "$KV." + hostbeat.Bucket + ".*",
			jsAPI + "STREAM.PURGE." + events.StreamName}, jsRead...)
		p.PublishDeny = projectorConsumer()
	case Projector:
		p.Publish = append([]string{"$KV." + lease.Bucket + ".*"}, jsRead...)
	default:
		id, _ := HostID(principal)
		p.Publish, p.PublishDeny = agentPermissions(id)
		// The API's reads of its own host's game server logs, answered.
		p.Subscribe = append(p.Subscribe, hostlogs.Subject(id))
		p.RespondWithin = hostlogs.ReplyWindow
	}
	return p, nil
}

// agentPermissions are a host agent's: its own host's events, the events
// of the game servers placed on it (their host subjects name it:
// events.HostGameServersSubject), any game session's (the folds judge those
// by signature), its own heartbeat key, its own commands' durable
// consumer, and reads of the events stream. A game server placed before
// host subjects (tether.ev.gs.<fleet>.<id>) is the control plane's to
// write: an agent of this version places none there.
func agentPermissions(id string) (allow, deny []string) {
	durable := "agent-" + id
	cmd := commands.StreamName
	ev := events.StreamName
	allow = []string{
		events.MustSubject(events.HostName(id)),
		events.HostGameServersSubject(id),
		events.SubjectPrefix + "." + events.KindGameSession + ".*",
		"$KV." + hostbeat.Bucket + "." + id,
		jsAPI + "INFO",
		jsAPI + "STREAM.INFO." + ev,
		jsAPI + "STREAM.INFO." + cmd,
		jsAPI + "STREAM.INFO." + kvHosts,
		jsAPI + "STREAM.MSG.GET." + ev,
		jsAPI + "DIRECT.GET." + ev,
		jsAPI + "DIRECT.GET." + ev + ".>",
		jsAPI + "DIRECT.GET." + kvHosts + ".$KV." + hostbeat.Bucket + "." + id,
		// History reads: ephemeral consumers of the events stream.
		jsAPI + "CONSUMER.CREATE." + ev + ".>",
		jsAPI + "CONSUMER.INFO." + ev + ".*",
		jsAPI + "CONSUMER.MSG.NEXT." + ev + ".*",
		jsAPI + "CONSUMER.DELETE." + ev + ".*",
		// Its own commands, through its own durable consumer.
		jsAPI + "CONSUMER.CREATE." + cmd + "." + durable + "." + commands.Subject(id),
		jsAPI + "CONSUMER.DURABLE.CREATE." + cmd + "." + durable,
		jsAPI + "CONSUMER.INFO." + cmd + "." + durable,
		jsAPI + "CONSUMER.MSG.NEXT." + cmd + "." + durable,
		"$JS.ACK." + cmd + "." + durable + ".>",
	}
	// The projector's durable consumer is not a history read's.
	return allow, projectorConsumer()
}

// projectorConsumer is what only the projector (and admin) may do: every
// JetStream API request that names the projector's durable consumer of the
// events stream, creating or updating it (CONSUMER.CREATE.<stream>.<consumer>
// with or without a filter, CONSUMER.DURABLE.CREATE), deleting, pausing,
// reading or moving it (CONSUMER.DELETE, PAUSE, INFO, MSG.NEXT,
// LEADER.STEPDOWN…), acknowledging its deliveries ($JS.ACK); and the legacy
// creation of an ephemeral consumer of the events stream
// (CONSUMER.CREATE.<stream>), whose body names the consumer (the projector's
// too), which no component uses: they name theirs in the subject. Deleted,
// the projector's consumer stopped the views; pulled or acknowledged by
// another, its events went elsewhere.
func projectorConsumer() []string {
	ev := events.StreamName
	return []string{
		jsAPI + "CONSUMER.*." + ev + "." + projectorCn,
		jsAPI + "CONSUMER.*." + ev + "." + projectorCn + ".>",
		jsAPI + "CONSUMER.*.*." + ev + "." + projectorCn,
		jsAPI + "CONSUMER.CREATE." + ev,
		"$JS.ACK." + ev + "." + projectorCn + ".>",
	}
}
