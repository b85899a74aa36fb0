package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// aggregateTable describes one view table: how to load a row's snapshot and
// how to upsert it. S is the folded state type.
type aggregateTable[S proto.Message] struct {
	table string
	apply func(S, events.Envelope) (S, error)
	// upsert queues the row's upsert, guarded by its last sequence.
	upsert func(b *pgx.Batch, s S, seq uint64) error
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

// apply folds one event; on error the aggregate keeps its state.
func (f *foldSet[S]) apply(e events.Envelope) error {
	r := f.rows[e.Aggregate]
	next, err := f.t.apply(r.state, e)
	if err != nil {
		return err
	}
	r.state, r.seq, r.changed = next, e.Sequence, true
	return nil
}

// queue adds the upserts of every changed aggregate to b.
func (f *foldSet[S]) queue(b *pgx.Batch) error {
	for _, r := range f.rows {
		if !r.changed {
			continue
		}
		if err := f.t.upsert(b, r.state, r.seq); err != nil {
			return err
		}
	}
	return nil
}

func labelsJSON(m map[string]string) ([]byte, error) {
	if m == nil {
		m = map[string]string{}
	}
	return json.Marshal(m)
}

var fleetTable = aggregateTable[*eventsv1.FleetState]{
	table: "fleets",
	apply: events.ApplyFleet,
	upsert: func(b *pgx.Batch, s *eventsv1.FleetState, seq uint64) error {
		snap, err := proto.Marshal(s)
		if err != nil {
			return fmt.Errorf("encode fleet %s: %w", s.GetName(), err)
		}
		labels, err := labelsJSON(s.GetSpec().GetLabels())
		if err != nil {
			return err
		}
		b.Queue(`INSERT INTO fleets (name, replicas, scheduling, labels, deleted, create_time, update_time, snapshot, last_sequence)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (name) DO UPDATE SET replicas = EXCLUDED.replicas, scheduling = EXCLUDED.scheduling,
  labels = EXCLUDED.labels, deleted = EXCLUDED.deleted, update_time = EXCLUDED.update_time,
  snapshot = EXCLUDED.snapshot, last_sequence = EXCLUDED.last_sequence
WHERE fleets.last_sequence < EXCLUDED.last_sequence`,
			s.GetName(), s.GetSpec().GetReplicas(), enumName(s.GetSpec().GetScheduling().String(), "SCHEDULING_"),
			labels, s.GetDeleted(), s.GetCreateTime().AsTime(), s.GetUpdateTime().AsTime(), snap, int64(seq))
		return nil
	},
}

var hostTable = aggregateTable[*eventsv1.HostState]{
	table: "hosts",
	apply: events.ApplyHost,
	upsert: func(b *pgx.Batch, s *eventsv1.HostState, seq uint64) error {
		snap, err := proto.Marshal(s)
		if err != nil {
			return fmt.Errorf("encode host %s: %w", s.GetName(), err)
		}
		labels, err := labelsJSON(s.GetLabels())
		if err != nil {
			return err
		}
		b.Queue(`INSERT INTO hosts (name, status, capacity, address, labels, last_heartbeat_time, update_time, snapshot, last_sequence)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (name) DO UPDATE SET status = EXCLUDED.status, capacity = EXCLUDED.capacity,
  address = EXCLUDED.address, labels = EXCLUDED.labels, last_heartbeat_time = EXCLUDED.last_heartbeat_time,
  update_time = EXCLUDED.update_time, snapshot = EXCLUDED.snapshot, last_sequence = EXCLUDED.last_sequence
WHERE hosts.last_sequence < EXCLUDED.last_sequence`,
			s.GetName(), enumName(s.GetStatus().String(), "HOST_STATUS_"), s.GetCapacity(), s.GetAddress(), labels,
			optionalTime(s.GetLastHeartbeatTime()), s.GetUpdateTime().AsTime(), snap, int64(seq))
		return nil
	},
}

var gameServerTable = aggregateTable[*eventsv1.GameServerState]{
	table: "game_servers",
	apply: events.ApplyGameServer,
	upsert: func(b *pgx.Batch, s *eventsv1.GameServerState, seq uint64) error {
		snap, err := proto.Marshal(s)
		if err != nil {
			return fmt.Errorf("encode game server %s: %w", s.GetName(), err)
		}
		labels, err := labelsJSON(s.GetLabels())
		if err != nil {
			return err
		}
		fleet, _, err := events.ParseGameServerName(s.GetName())
		if err != nil {
			return err
		}
		b.Queue(`INSERT INTO game_servers (name, fleet, host, state, connection, health, missed_periods, reason, pid,
  address, game_session, labels, create_time, update_time, snapshot, last_sequence)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
ON CONFLICT (name) DO UPDATE SET host = EXCLUDED.host, state = EXCLUDED.state, connection = EXCLUDED.connection,
  health = EXCLUDED.health, missed_periods = EXCLUDED.missed_periods, reason = EXCLUDED.reason, pid = EXCLUDED.pid,
  address = EXCLUDED.address, game_session = EXCLUDED.game_session, labels = EXCLUDED.labels,
  update_time = EXCLUDED.update_time, snapshot = EXCLUDED.snapshot, last_sequence = EXCLUDED.last_sequence
WHERE game_servers.last_sequence < EXCLUDED.last_sequence`,
			s.GetName(), events.FleetName(fleet), s.GetHost(), events.LifecycleName(s.GetLifecycle()),
			enumName(s.GetConnection().String(), "CONNECTION_STATE_"), enumName(s.GetHealth().String(), "HEALTH_STATE_"),
			s.GetMissedPeriods(), events.ReasonName(s.GetReason()), s.GetPid(), s.GetAddress(), s.GetGameSession(),
			labels, s.GetCreateTime().AsTime(), s.GetUpdateTime().AsTime(), snap, int64(seq))
		return nil
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
