package postgres

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// The projector's metrics of the fleets themselves (docs/observability.md
// lists them): gauges read from the views, and counters of the events it
// applies. The projector is where both belong: it owns the views, and
// exactly one instance applies each event once (the active one, fenced by
// its lease), so a counter summed over the projectors counts each event
// once, and only the active one reports the gauges.
//
// Label values are bounded: `fleet` takes at most MaxFleetLabels distinct
// values per projector process (the rest are added up under OtherFleets),
// `state`, `status` and `reason` come from the domain's enums, and no label
// names a game server, a session or a host.

// Defaults of the fleet metrics.
const (
	// DefaultFleetMetricsInterval is how often, at most, the fleet gauges
	// are read from the views (ProjectorOptions.FleetMetricsInterval): a
	// scrape within it is answered from the last reading.
	DefaultFleetMetricsInterval = 15 * time.Second
	// DefaultMaxFleetLabels is how many fleets a projector labels by name
	// (ProjectorOptions.MaxFleetLabels).
	DefaultMaxFleetLabels = 100
	// OtherFleets is the fleet label value of every fleet past
	// MaxFleetLabels, their figures added up. A fleet id starts with a
	// letter, so it never clashes with one.
	OtherFleets = "_other"
	// CountWindow: an event applied more than this long after it happened
	// is not counted. Views rebuilt or made afresh from a stream that holds
	// months of history (tether dev keeps its stream and starts a new
	// database) would otherwise count every termination of those months as
	// happening now.
	CountWindow = 10 * time.Minute
)

// fleetMetricsTimeout bounds one reading of the views for the gauges.
const fleetMetricsTimeout = 5 * time.Second

// Label values of tether_player_sessions_ended_total's reason that are not
// PlayerSessionEndReason values.
const endReservationTimedOut = "RESERVATION_TIMED_OUT"

// fleetLabels bounds the fleet label's values: the first max fleets a
// process meets keep their own, for the life of the process (a counter's
// series never go away, so admitting more later would not bound them); the
// others are OtherFleets.
type fleetLabels struct {
	mu  sync.Mutex
	max int
	own map[string]bool
}

func newFleetLabels(max int) *fleetLabels {
	return &fleetLabels{max: max, own: map[string]bool{}}
}

// label returns the label value of a fleet id.
func (l *fleetLabels) label(fleet string) string {
	if fleet == "" {
		return OtherFleets
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.own[fleet] {
		return fleet
	}
	if len(l.own) < l.max {
		l.own[fleet] = true
		return fleet
	}
	return OtherFleets
}

// fleetID returns the id of "fleets/{fleet}", or "" for anything else.
func fleetID(name string) string {
	id, err := events.ParseFleetName(name)
	if err != nil {
		return ""
	}
	return id
}

// The counters of applied events, by index in projectorMetrics.counters.
const (
	cTerminations = iota
	cHealthFailures
	cReconnects
	cDisconnects
	cPlayersEnded
	cHostChanges
	numCounters
)

// eventCounters names and describes each counter, by index.
var eventCounters = [numCounters]struct{ name, desc string }{
	cTerminations:   {"tether_gameserver_terminations", "Game servers terminated (GameServerTerminated applied), by fleet and reason."},
	cHealthFailures: {"tether_gameserver_health_failures", "Game servers that turned UNHEALTHY (GameServerUnhealthy applied), by fleet and reason."},
	cReconnects:     {"tether_player_reconnects", "Players who came back to their seat (PlayerReconnected, or PlayerTakenOver: a new connection took the seat from one the server had not seen drop), by fleet."},
	cDisconnects:    {"tether_player_disconnects", "Players whose game server reported their connection lost (PlayerDisconnected applied), by fleet."},
	cPlayersEnded: {"tether_player_sessions_ended",
		"Player sessions ended, by fleet and reason: LEFT, RECONNECT_WINDOW_EXPIRED, GAME_SESSION_ENDED, RESERVATION_TIMED_OUT."},
	cHostChanges: {"tether_host_status_changes",
		"Host status events applied, by the status they set: ONLINE (heartbeats back), UNREACHABLE, LOST, DRAINING, DRAINED, DEREGISTERED."},
}

// projectorMetrics are the counters of applied events and the gauges of
// the views.
type projectorMetrics struct {
	log      *slog.Logger
	labels   *fleetLabels
	counters [numCounters]metric.Int64Counter
	gauges   *viewGauges
}

// newProjectorMetrics registers the metrics of a live projector; active
// says whether it is projecting now (only then does it report the gauges).
// A scratch projector (rebuild, check) registers none: its events are
// history, not news.
func newProjectorMetrics(opts ProjectorOptions, active func() bool) (*projectorMetrics, error) {
	mp := opts.MeterProvider
	if opts.Scratch {
		mp = metricnoop.NewMeterProvider()
	}
	every := cmp.Or(opts.FleetMetricsInterval, DefaultFleetMetricsInterval)
	maxFleets := max(cmp.Or(opts.MaxFleetLabels, DefaultMaxFleetLabels), 0)
	m := &projectorMetrics{log: opts.Logger, labels: newFleetLabels(maxFleets)}
	meter := mp.Meter("github.com/tetherhq/tether/projections/postgres")
	var err error
	for i, c := range eventCounters {
		if m.counters[i], err = meter.Int64Counter(c.name, metric.WithDescription(c.desc)); err != nil {
			return nil, err
		}
	}
	// Every host status from zero, so the first loss is an increase that
	// rate() and increase() see, not a series that appears at 1.
	for _, s := range hostEventStatus {
		m.counters[cHostChanges].Add(context.Background(), 0, metric.WithAttributes(attribute.String("status", s)))
	}
	if opts.Scratch {
		return m, nil
	}
	m.gauges = &viewGauges{pool: opts.Pool, every: every, labels: m.labels, active: active, log: opts.Logger}
	if err := m.gauges.register(meter); err != nil {
		return nil, err
	}
	return m, nil
}

// hostEventStatus is the status label of each host event that sets one.
var hostEventStatus = map[string]string{
	"HostOnline":         "ONLINE",
	"HostUnreachable":    "UNREACHABLE",
	"HostLost":           "LOST",
	"HostDrainRequested": "DRAINING",
	"HostDrained":        "DRAINED",
	"HostDeregistered":   "DEREGISTERED",
}

// countKey is one counter's series within a batch: fleet is empty for
// tether_host_status_changes, reason for the counters without one.
type countKey struct {
	c             int
	fleet, reason string
}

// count adds a committed batch's events to the counters: envs are the
// events decoded, dead the ones dead-lettered (not applied), folds the
// states they were folded into. Events older than CountWindow are history
// being replayed and are left out.
func (m *projectorMetrics) count(ctx context.Context, envs []events.Envelope, dead []deadLetter, folds map[string]folder, now time.Time) {
	var refused map[uint64]bool
	if len(dead) > 0 {
		refused = make(map[uint64]bool, len(dead))
		for _, d := range dead {
			refused[d.seq] = true
		}
	}
	tally := map[countKey]int64{}
	add := func(k countKey, n int64) {
		if n > 0 {
			tally[k] += n
		}
	}
	for _, e := range envs {
		if refused[e.Sequence] || now.Sub(e.Time) > CountWindow {
			continue
		}
		switch d := e.Data.(type) {
		case *eventsv1.GameServerTerminated:
			add(countKey{c: cTerminations, fleet: m.serverFleet(e.Aggregate), reason: reasonLabel(d.GetReason())}, 1)
		case *eventsv1.GameServerUnhealthy:
			add(countKey{c: cHealthFailures, fleet: m.serverFleet(e.Aggregate), reason: reasonLabel(d.GetReason())}, 1)
		case *eventsv1.PlayerReconnected, *eventsv1.PlayerTakenOver:
			add(countKey{c: cReconnects, fleet: m.sessionFleet(folds, e.Aggregate)}, 1)
		case *eventsv1.PlayerDisconnected:
			add(countKey{c: cDisconnects, fleet: m.sessionFleet(folds, e.Aggregate)}, 1)
		case *eventsv1.PlayerSessionCompleted:
			add(countKey{c: cPlayersEnded, fleet: m.sessionFleet(folds, e.Aggregate),
				reason: enumName(d.GetReason().String(), "PLAYER_SESSION_END_REASON_")}, 1)
		case *eventsv1.PlayerSessionTimedOut:
			add(countKey{c: cPlayersEnded, fleet: m.sessionFleet(folds, e.Aggregate), reason: endReservationTimedOut}, 1)
		case *eventsv1.GameSessionEnded:
			// The fold ends the seats still held with GAME_SESSION_ENDED,
			// without an event of their own; a game session ends once, so
			// its players with that reason are the ones it ended.
			add(countKey{c: cPlayersEnded, fleet: m.sessionFleet(folds, e.Aggregate),
				reason: "GAME_SESSION_ENDED"}, endedWithSession(folds, e.Aggregate))
		default:
			if s, ok := hostEventStatus[e.Type]; ok {
				add(countKey{c: cHostChanges, reason: s}, 1)
			}
		}
	}
	for k, n := range tally {
		var attrs []attribute.KeyValue
		switch {
		case k.c == cHostChanges:
			attrs = []attribute.KeyValue{attribute.String("status", k.reason)}
		case k.reason != "":
			attrs = []attribute.KeyValue{attribute.String("fleet", k.fleet), attribute.String("reason", k.reason)}
		default:
			attrs = []attribute.KeyValue{attribute.String("fleet", k.fleet)}
		}
		m.counters[k.c].Add(ctx, n, metric.WithAttributes(attrs...))
	}
}

// serverFleet is the fleet label of a game server's name.
func (m *projectorMetrics) serverFleet(name string) string {
	fleet, _, err := events.ParseGameServerName(name)
	if err != nil {
		return OtherFleets
	}
	return m.labels.label(fleet)
}

// sessionFleet is the fleet label of a game session, from its folded state.
func (m *projectorMetrics) sessionFleet(folds map[string]folder, name string) string {
	s := sessionState(folds, name)
	if s == nil {
		return OtherFleets
	}
	fleet, _, err := events.ParseGameServerName(s.GetGameServer())
	if err != nil {
		return OtherFleets
	}
	return m.labels.label(fleet)
}

// sessionState is a game session's state as the batch folded it, or nil.
func sessionState(folds map[string]folder, name string) *eventsv1.GameSessionState {
	fs, ok := folds[events.KindGameSession].(*foldSet[*eventsv1.GameSessionState])
	if !ok {
		return nil
	}
	r, ok := fs.rows[name]
	if !ok {
		return nil
	}
	return r.state
}

// endedWithSession counts the player sessions a game session's end ended.
func endedWithSession(folds map[string]folder, name string) int64 {
	var n int64
	for _, p := range sessionState(folds, name).GetPlayers() {
		if p.GetEndReason() == eventsv1.PlayerSessionEndReason_PLAYER_SESSION_END_REASON_GAME_SESSION_ENDED {
			n++
		}
	}
	return n
}

// reasonLabel is a termination reason's label value.
func reasonLabel(r eventsv1.Reason) string {
	return cmp.Or(events.ReasonName(r), "UNSPECIFIED")
}

// liveStates are the lifecycle states of tether_fleet_game_servers:
// every state but TERMINATED (ended servers are counted by
// tether_gameserver_terminations_total instead).
var liveStates = func() []string {
	var out []string
	for n := range eventsv1.Lifecycle_name {
		l := eventsv1.Lifecycle(n)
		if l == eventsv1.Lifecycle_LIFECYCLE_UNSPECIFIED || l == eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
			continue
		}
		out = append(out, events.LifecycleName(l))
	}
	slices.Sort(out)
	return out
}()

// hostStatuses are the status values of tether_hosts.
var hostStatuses = func() []string {
	var out []string
	for n, name := range eventsv1.HostStatus_name {
		if eventsv1.HostStatus(n) != eventsv1.HostStatus_HOST_STATUS_UNSPECIFIED {
			out = append(out, enumName(name, "HOST_STATUS_"))
		}
	}
	slices.Sort(out)
	return out
}()

// viewsQuery reads every gauge in one statement: live game servers by
// fleet and state, fleets' replicas, active game sessions and their seats
// by fleet, hosts by status. Its cost is one pass over game_servers and
// hosts, and over the ACTIVE rows of game_sessions, per interval.
const viewsQuery = `SELECT 'servers', fleet, state, count(*)::bigint, 0::bigint FROM game_servers WHERE state <> 'TERMINATED' GROUP BY fleet, state
UNION ALL SELECT 'fleet', name, '', replicas::bigint, 0::bigint FROM fleets WHERE NOT deleted
UNION ALL SELECT 'sessions', fleet, '', count(*)::bigint, coalesce(sum(player_count), 0)::bigint FROM game_sessions WHERE state = 'ACTIVE' GROUP BY fleet
UNION ALL SELECT 'hosts', '', status, count(*)::bigint, 0::bigint FROM hosts GROUP BY status`

// fleetFigures are one fleet's gauges (or the sum of the OtherFleets).
type fleetFigures struct {
	servers     map[string]int64 // by state
	live        int64
	replicas    int64
	hasReplicas bool // the fleet exists (not deleted)
	sessions    int64
	players     int64
}

// viewReading is one reading of the views for the gauges.
type viewReading struct {
	fleets map[string]*fleetFigures // by label value
	hosts  map[string]int64         // by status
}

// viewGauges serves the gauges read from the views, reading them at most
// once per interval, whatever the number of scrapes.
type viewGauges struct {
	pool   *pgxpool.Pool
	every  time.Duration
	labels *fleetLabels
	active func() bool
	log    *slog.Logger

	mu      sync.Mutex
	readAt  time.Time
	reading *viewReading

	servers, replicas, sessions, players, hosts metric.Int64ObservableGauge
}

func (g *viewGauges) register(meter metric.Meter) error {
	var err error
	gauges := []struct {
		g    *metric.Int64ObservableGauge
		name string
		desc string
	}{
		{&g.servers, "tether_fleet_game_servers", "Game servers not TERMINATED, by fleet and lifecycle state (ALLOCATED: in a match)."},
		{&g.replicas, "tether_fleet_replicas", "Replicas each fleet asks for (its spec, autoscaled or not)."},
		{&g.sessions, "tether_fleet_game_sessions", "Game sessions ACTIVE, by fleet."},
		{&g.players, "tether_fleet_players", "Seats held in ACTIVE game sessions (players reserved, connected, or disconnected within their reconnect window), by fleet."},
		{&g.hosts, "tether_hosts", "Hosts by status."},
	}
	instruments := make([]metric.Observable, 0, len(gauges))
	for _, x := range gauges {
		if *x.g, err = meter.Int64ObservableGauge(x.name, metric.WithDescription(x.desc)); err != nil {
			return err
		}
		instruments = append(instruments, *x.g)
	}
	_, err = meter.RegisterCallback(g.observe, instruments...)
	return err
}

// observe reports the last reading, reading the views again when it is
// older than the interval. A standby reports nothing.
func (g *viewGauges) observe(ctx context.Context, o metric.Observer) error {
	if !g.active() {
		return nil
	}
	r := g.current(ctx)
	if r == nil {
		return nil
	}
	for fleet, f := range r.fleets {
		fa := attribute.String("fleet", fleet)
		for _, s := range liveStates {
			o.ObserveInt64(g.servers, f.servers[s], metric.WithAttributes(fa, attribute.String("state", s)))
		}
		if f.hasReplicas {
			o.ObserveInt64(g.replicas, f.replicas, metric.WithAttributes(fa))
		}
		o.ObserveInt64(g.sessions, f.sessions, metric.WithAttributes(fa))
		o.ObserveInt64(g.players, f.players, metric.WithAttributes(fa))
	}
	for _, s := range hostStatuses {
		o.ObserveInt64(g.hosts, r.hosts[s], metric.WithAttributes(attribute.String("status", s)))
	}
	return nil
}

// current returns the reading of this interval, reading the views if
// needed. A failed reading is logged and tried again at the next interval;
// meanwhile the last good one is served, if it is at most three intervals
// old.
func (g *viewGauges) current(ctx context.Context) *viewReading {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if g.reading != nil && now.Sub(g.readAt) < g.every {
		return g.reading
	}
	ctx, cancel := context.WithTimeout(ctx, fleetMetricsTimeout)
	defer cancel()
	r, err := g.read(ctx)
	if err == nil {
		g.reading, g.readAt = r, now
		return r
	}
	g.log.Warn("fleet metrics: reading the views failed", "err", err)
	if g.reading != nil && now.Sub(g.readAt) > 3*g.every {
		g.reading = nil
	}
	return g.reading
}

// read runs viewsQuery and labels its fleets: the largest first, so that
// past MaxFleetLabels it is the small fleets that are added up.
func (g *viewGauges) read(ctx context.Context) (*viewReading, error) {
	rows, err := g.pool.Query(ctx, viewsQuery)
	if err != nil {
		return nil, fmt.Errorf("views: %w", err)
	}
	defer rows.Close()
	byFleet := map[string]*fleetFigures{}
	fleet := func(name string) *fleetFigures {
		f := byFleet[name]
		if f == nil {
			f = &fleetFigures{servers: map[string]int64{}}
			byFleet[name] = f
		}
		return f
	}
	r := &viewReading{fleets: map[string]*fleetFigures{}, hosts: map[string]int64{}}
	for rows.Next() {
		var kind, name, state string
		var n, m int64
		if err := rows.Scan(&kind, &name, &state, &n, &m); err != nil {
			return nil, fmt.Errorf("views: %w", err)
		}
		switch kind {
		case "servers":
			f := fleet(name)
			f.servers[state] += n
			f.live += n
		case "fleet":
			f := fleet(name)
			f.replicas, f.hasReplicas = n, true
		case "sessions":
			f := fleet(name)
			f.sessions, f.players = n, m
		case "hosts":
			r.hosts[state] += n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("views: %w", err)
	}
	names := make([]string, 0, len(byFleet))
	for n := range byFleet {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(byFleet[b].live, byFleet[a].live), strings.Compare(a, b))
	})
	for _, n := range names {
		label := g.labels.label(fleetID(n))
		f, into := byFleet[n], r.fleets[label]
		if into == nil {
			r.fleets[label] = f
			continue
		}
		for s, c := range f.servers {
			into.servers[s] += c
		}
		into.live += f.live
		into.replicas += f.replicas
		into.hasReplicas = into.hasReplicas || f.hasReplicas
		into.sessions += f.sessions
		into.players += f.players
	}
	return r, nil
}
