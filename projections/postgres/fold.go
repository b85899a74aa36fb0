package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// aggregateTable describes one view table: its columns (the first is the
// primary key "name", the last "last_sequence"), how to fold an event into
// its state type S, and how to turn a state into a row.
type aggregateTable[S proto.Message] struct {
	table   string
	columns []string
	apply   func(S, events.Envelope) (S, error)
	row     func(s S, seq uint64) ([]any, error)
}

// folded is the state of one aggregate while a batch is folded into it.
type folded[S proto.Message] struct {
	state   S
	seq     uint64 // sequence of the last event applied (0: loaded only)
	changed bool
}

// foldSet folds the events of one batch into the aggregates of one table.
type foldSet[S proto.Message] struct {
	t    aggregateTable[S]
	rows map[string]*folded[S]
}

func newFoldSet[S proto.Message](t aggregateTable[S]) *foldSet[S] {
	return &foldSet[S]{t: t, rows: map[string]*folded[S]{}}
}

func (f *foldSet[S]) want(name string) {
	if _, ok := f.rows[name]; !ok {
		f.rows[name] = &folded[S]{}
	}
}

// load reads the current snapshots of every aggregate the batch touches.
func (f *foldSet[S]) load(ctx context.Context, tx pgx.Tx) error {
	if len(f.rows) == 0 {
		return nil
	}
	names := make([]string, 0, len(f.rows))
	for n := range f.rows {
		names = append(names, n)
	}
	rows, err := tx.Query(ctx, "SELECT name, snapshot FROM "+f.t.table+" WHERE name = ANY($1)", names)
	if err != nil {
		return fmt.Errorf("load %s: %w", f.t.table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var snap []byte
		if err := rows.Scan(&name, &snap); err != nil {
			return fmt.Errorf("scan %s: %w", f.t.table, err)
		}
		var zero S
		s := zero.ProtoReflect().New().Interface().(S)
		if err := proto.Unmarshal(snap, s); err != nil {
			return fmt.Errorf("decode %s snapshot of %s: %w", f.t.table, name, err)
		}
		f.rows[name].state = s
	}
	return rows.Err()
}

// apply folds one event; on error the aggregate keeps its state. An event
// every fold leaves out (events.Skipped: a writer that may not write it,
// or an undecodable message, events.UndecodableAt) still moves an existing
// aggregate's last_sequence to it: the API and the controller guard their
// appends on that sequence, and a row left behind a dead letter would make
// every write to the aggregate conflict for good.
func (f *foldSet[S]) apply(e events.Envelope) error {
	r := f.rows[e.Aggregate]
	next, err := f.t.apply(r.state, e)
	if events.Skipped(err) && r.state.ProtoReflect().IsValid() {
		r.seq, r.changed = max(r.seq, e.Sequence), true
	}
	if err != nil {
		return err
	}
	r.state, r.seq, r.changed = next, e.Sequence, true
	return nil
}

// directRows is the largest batch of rows written with one multi-row
// INSERT instead of through a staging table.
const directRows = 256

// write upserts every changed aggregate with one INSERT … ON CONFLICT per
// table that only overwrites rows holding an older last_sequence (so a
// redelivered batch changes nothing). One statement per table instead of one
// per row is what makes replay fast. Large batches (replay, catch-up) are
// COPYed into a session-local staging table first; small ones (live
// traffic) go straight in as VALUES, because a staging table declared ON
// COMMIT DELETE ROWS is truncated at every commit that used it, and that
// truncation waits on the file system now and then (stalls of 100-600 ms
// were measured on the reference machine, in one live batch of 50 events).
func (f *foldSet[S]) write(ctx context.Context, tx pgx.Tx) error {
	var rows [][]any
	for _, r := range f.rows {
		if !r.changed {
			continue
		}
		row, err := f.t.row(r.state, r.seq)
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil
	}
	cols := strings.Join(f.t.columns, ", ")
	var set []string
	for _, c := range f.t.columns[1:] {
		if c != "create_time" {
			set = append(set, c+" = EXCLUDED."+c)
		}
	}
	upsert := " ON CONFLICT (name) DO UPDATE SET " + strings.Join(set, ", ") +
		" WHERE " + f.t.table + ".last_sequence < EXCLUDED.last_sequence"
	if len(rows) <= directRows {
		var b strings.Builder
		args := make([]any, 0, len(rows)*len(f.t.columns))
		b.WriteString("INSERT INTO " + f.t.table + " (" + cols + ") VALUES ")
		for i, row := range rows {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(")
			for j, v := range row {
				if j > 0 {
					b.WriteString(", ")
				}
				args = append(args, v)
				fmt.Fprintf(&b, "$%d", len(args))
			}
			b.WriteString(")")
		}
		if _, err := tx.Exec(ctx, b.String()+upsert, args...); err != nil {
			return fmt.Errorf("upsert %s: %w", f.t.table, err)
		}
		return nil
	}
	stage := "stage_" + f.t.table
	if _, err := tx.Exec(ctx, "CREATE TEMP TABLE IF NOT EXISTS "+stage+" (LIKE "+f.t.table+") ON COMMIT DELETE ROWS"); err != nil {
		return fmt.Errorf("stage %s: %w", f.t.table, err)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{stage}, f.t.columns, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("copy %s: %w", f.t.table, err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+f.t.table+" ("+cols+") SELECT "+cols+" FROM "+stage+upsert); err != nil {
		return fmt.Errorf("merge %s: %w", f.t.table, err)
	}
	return nil
}

func labelsJSON(m map[string]string) ([]byte, error) {
	if m == nil {
		m = map[string]string{}
	}
	return json.Marshal(m)
}

// counterJSON and listJSON are a game server's counter and list in its
// row's counters and lists columns: counts and capacities as JSON numbers,
// for queries to compare (protojson would write int64 as strings).
type (
	counterJSON struct {
		Count    int64 `json:"count"`
		Capacity int64 `json:"capacity"`
	}
	listJSON struct {
		Capacity int64    `json:"capacity"`
		Values   []string `json:"values"`
	}
)

// countersJSON encodes a game server's counters and lists for its row;
// none is {}.
func countersJSON(s *eventsv1.GameServerState) (counters, lists []byte, err error) {
	cs := make(map[string]counterJSON, len(s.GetCounters()))
	for name, c := range s.GetCounters() {
		cs[name] = counterJSON{Count: c.GetCount(), Capacity: c.GetCapacity()}
	}
	ls := make(map[string]listJSON, len(s.GetLists()))
	for name, l := range s.GetLists() {
		ls[name] = listJSON{Capacity: l.GetCapacity(), Values: append([]string{}, l.GetValues()...)}
	}
	if counters, err = json.Marshal(cs); err != nil {
		return nil, nil, fmt.Errorf("encode the counters of %s: %w", s.GetName(), err)
	}
	if lists, err = json.Marshal(ls); err != nil {
		return nil, nil, fmt.Errorf("encode the lists of %s: %w", s.GetName(), err)
	}
	return counters, lists, nil
}

// folder folds one batch's events into the aggregates of one view table.
type folder interface {
	want(name string)
	load(ctx context.Context, tx pgx.Tx) error
	apply(e events.Envelope) error
	write(ctx context.Context, tx pgx.Tx) error
}

// view is one aggregate kind's view table, as the projector, the
// dead-letter retry, rebuild and check use it.
type view interface {
	// tableName is the view table.
	tableName() string
	// newFolder starts folding a batch into it.
	newFolder() folder
	// refold folds an aggregate's history again (a dead-letter retry).
	refold(ctx context.Context, r *refolder) (uint64, error)
}

func (t aggregateTable[S]) tableName() string { return t.table }
func (t aggregateTable[S]) newFolder() folder { return newFoldSet(t) }
func (t aggregateTable[S]) refold(ctx context.Context, r *refolder) (uint64, error) {
	return refold(ctx, r, t)
}

// views is each registered aggregate kind's view (events.Aggregates);
// views_internal_test.go fails for a registered kind without one.
var views = map[string]view{
	events.KindFleet:       fleetTable,
	events.KindHost:        hostTable,
	events.KindGameServer:  gameServerTable,
	events.KindGameSession: gameSessionTable,
}

// viewOrder lists the views in the registry's order.
func viewOrder() []view {
	var out []view
	for _, a := range events.Aggregates() {
		if v, ok := views[a.Kind]; ok {
			out = append(out, v)
		}
	}
	return out
}

// folders starts folding a batch into every view, by kind.
func folders() map[string]folder {
	out := make(map[string]folder, len(views))
	for kind, v := range views {
		out[kind] = v.newFolder()
	}
	return out
}

// eachFolder calls do on the folders in the registry's order.
func eachFolder(fs map[string]folder, do func(folder) error) error {
	for _, a := range events.Aggregates() {
		if f, ok := fs[a.Kind]; ok {
			if err := do(f); err != nil {
				return err
			}
		}
	}
	return nil
}

var fleetTable = aggregateTable[*eventsv1.FleetState]{
	table:   "fleets",
	columns: []string{"name", "replicas", "scheduling", "labels", "deleted", "create_time", "update_time", "snapshot", "last_sequence"},
	apply:   events.ApplyFleet,
	row: func(s *eventsv1.FleetState, seq uint64) ([]any, error) {
		snap, err := snapshotOf(s)
		if err != nil {
			return nil, fmt.Errorf("encode fleet %s: %w", s.GetName(), err)
		}
		labels, err := labelsJSON(s.GetSpec().GetLabels())
		if err != nil {
			return nil, err
		}
		return []any{s.GetName(), s.GetSpec().GetReplicas(), enumName(s.GetSpec().GetScheduling().String(), "SCHEDULING_"),
			labels, s.GetDeleted(), s.GetCreateTime().AsTime(), s.GetUpdateTime().AsTime(), snap, int64(seq)}, nil
	},
}

var hostTable = aggregateTable[*eventsv1.HostState]{
	table:   "hosts",
	columns: []string{"name", "status", "capacity", "address", "labels", "last_heartbeat_time", "update_time", "registered_sequence", "game_ports", "cordoned", "draining", "snapshot", "last_sequence"},
	apply:   events.ApplyHost,
	row: func(s *eventsv1.HostState, seq uint64) ([]any, error) {
		snap, err := snapshotOf(s)
		if err != nil {
			return nil, fmt.Errorf("encode host %s: %w", s.GetName(), err)
		}
		labels, err := labelsJSON(s.GetLabels())
		if err != nil {
			return nil, err
		}
		return []any{s.GetName(), enumName(s.GetStatus().String(), "HOST_STATUS_"), s.GetCapacity(), s.GetAddress(), labels,
			optionalTime(s.GetLastHeartbeatTime()), s.GetUpdateTime().AsTime(), int64(s.GetRegisteredSequence()), s.GetGamePorts(),
			s.GetCordoned(), s.GetDraining(), snap, int64(seq)}, nil
	},
}

var gameServerTable = aggregateTable[*eventsv1.GameServerState]{
	table: "game_servers",
	columns: []string{"name", "fleet", "host", "state", "connection", "health", "missed_periods", "reason", "pid",
		"address", "game_session", "labels", "revision", "subject", "counters", "lists", "players_available", "create_time", "update_time", "snapshot", "last_sequence"},
	apply: events.ApplyGameServer,
	row: func(s *eventsv1.GameServerState, seq uint64) ([]any, error) {
		snap, err := snapshotOf(s)
		if err != nil {
			return nil, fmt.Errorf("encode game server %s: %w", s.GetName(), err)
		}
		labels, err := labelsJSON(s.GetLabels())
		if err != nil {
			return nil, err
		}
		fleet, _, err := events.ParseGameServerName(s.GetName())
		if err != nil {
			return nil, err
		}
		subject, err := events.SubjectOf(s)
		if err != nil {
			return nil, err
		}
		counters, lists, err := countersJSON(s)
		if err != nil {
			return nil, err
		}
		return []any{s.GetName(), events.FleetName(fleet), s.GetHost(), events.LifecycleName(s.GetLifecycle()),
			enumName(s.GetConnection().String(), "CONNECTION_STATE_"), enumName(s.GetHealth().String(), "HEALTH_STATE_"),
			s.GetMissedPeriods(), events.ReasonName(s.GetReason()), s.GetPid(), s.GetAddress(), s.GetGameSession(),
			labels, s.GetRevision(), subject, counters, lists, projections.PlayersAvailable(s), s.GetCreateTime().AsTime(), s.GetUpdateTime().AsTime(), snap, int64(seq)}, nil
	},
}

var gameSessionTable = aggregateTable[*eventsv1.GameSessionState]{
	table: "game_sessions",
	columns: []string{"name", "game_server", "fleet", "state", "player_count", "next_deadline",
		"create_time", "update_time", "snapshot", "last_sequence"},
	apply: events.ApplyGameSession,
	row: func(s *eventsv1.GameSessionState, seq uint64) ([]any, error) {
		snap, err := snapshotOf(s)
		if err != nil {
			return nil, fmt.Errorf("encode game session %s: %w", s.GetName(), err)
		}
		fleet, _, err := events.ParseGameServerName(s.GetGameServer())
		if err != nil {
			return nil, err
		}
		var deadline any
		if d := events.NextDeadline(s); !d.IsZero() {
			deadline = d
		}
		return []any{s.GetName(), s.GetGameServer(), events.FleetName(fleet), events.GameSessionStatusName(s.GetStatus()),
			int32(events.SeatsTaken(s)), deadline, s.GetCreateTime().AsTime(), s.GetUpdateTime().AsTime(), snap, int64(seq)}, nil
	},
}

// enumName strips a protobuf enum prefix: "HOST_STATUS_ONLINE" → "ONLINE".
// Unset values ("…_UNSPECIFIED") become "UNSPECIFIED".
func enumName(s, prefix string) string {
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):]
	}
	return s
}

// snapshotOf encodes a folded state for its row. Deterministically: the
// same state always gives the same bytes (map fields in key order), so that
// the check command can compare snapshots byte for byte.
func snapshotOf(s proto.Message) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(s)
}
