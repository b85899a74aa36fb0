package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// Views reads the projected tables.
type Views struct {
	pool *pgxpool.Pool
}

// NewViews returns a reader over the views in pool.
func NewViews(pool *pgxpool.Pool) *Views { return &Views{pool: pool} }

// Checkpoint returns the sequence the views have applied up to.
func (v *Views) Checkpoint(ctx context.Context) (uint64, error) {
	var cp int64
	err := v.pool.QueryRow(ctx, `SELECT sequence FROM projector_checkpoints WHERE partition = $1`, projections.Partition).Scan(&cp)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("views: read checkpoint: %w", err)
	}
	return uint64(cp), nil
}

const fleetColumns = `f.snapshot, f.last_sequence,
  count(*) FILTER (WHERE g.state = 'READY'), count(*) FILTER (WHERE g.state = 'RESERVED'),
  count(*) FILTER (WHERE g.state = 'ALLOCATED'), count(*) FILTER (WHERE g.state = 'UNHEALTHY'),
  count(g.name) FILTER (WHERE g.state <> 'TERMINATED')`

// Fleet returns a fleet, deleted or not, or projections.ErrNotFound.
func (v *Views) Fleet(ctx context.Context, name string) (projections.FleetRow, error) {
	rows, err := v.pool.Query(ctx, `SELECT `+fleetColumns+`
FROM fleets f LEFT JOIN game_servers g ON g.fleet = f.name
WHERE f.name = $1 GROUP BY f.name`, name)
	if err != nil {
		return projections.FleetRow{}, fmt.Errorf("views: fleet %s: %w", name, err)
	}
	list, err := scanFleets(rows)
	if err != nil {
		return projections.FleetRow{}, err
	}
	if len(list) == 0 {
		return projections.FleetRow{}, fmt.Errorf("fleet %s: %w", name, projections.ErrNotFound)
	}
	return list[0], nil
}

// FleetRevisions counts a fleet's live (not TERMINATED) game servers per
// revision, newest first.
func (v *Views) FleetRevisions(ctx context.Context, fleet string) ([]projections.RevisionCount, error) {
	rows, err := v.pool.Query(ctx, `SELECT revision, count(*), count(*) FILTER (WHERE state = 'READY'), count(*) FILTER (WHERE state = 'ALLOCATED')
FROM game_servers WHERE fleet = $1 AND state <> 'TERMINATED' GROUP BY revision ORDER BY revision DESC`, fleet)
	if err != nil {
		return nil, fmt.Errorf("views: revisions of %s: %w", fleet, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (projections.RevisionCount, error) {
		var c projections.RevisionCount
		err := row.Scan(&c.Revision, &c.Live, &c.Ready, &c.Allocated)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("views: revisions of %s: %w", fleet, err)
	}
	return out, nil
}

// ListFleets returns up to limit live (not deleted) fleets whose names sort
// after the given name.
func (v *Views) ListFleets(ctx context.Context, after string, limit int) ([]projections.FleetRow, error) {
	rows, err := v.pool.Query(ctx, `SELECT `+fleetColumns+`
FROM fleets f LEFT JOIN game_servers g ON g.fleet = f.name
WHERE NOT f.deleted AND f.name > $1 GROUP BY f.name ORDER BY f.name LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("views: list fleets: %w", err)
	}
	return scanFleets(rows)
}

// FleetState returns a fleet, deleted or not, without its game servers
// counted, or projections.ErrNotFound: one row of the fleets table, for a
// reader that needs the spec alone (an allocation's player-session
// policy). Fleet counts every game server of the fleet, which at 10,000
// servers a fleet costs milliseconds, and more on a busy database.
func (v *Views) FleetState(ctx context.Context, name string) (projections.Row[*eventsv1.FleetState], error) {
	rows, err := v.pool.Query(ctx, `SELECT snapshot, last_sequence FROM fleets WHERE name = $1`, name)
	if err != nil {
		return projections.Row[*eventsv1.FleetState]{}, fmt.Errorf("views: fleet %s: %w", name, err)
	}
	list, err := scanRows[*eventsv1.FleetState](rows)
	if err != nil {
		return projections.Row[*eventsv1.FleetState]{}, err
	}
	if len(list) == 0 {
		return projections.Row[*eventsv1.FleetState]{}, fmt.Errorf("fleet %s: %w", name, projections.ErrNotFound)
	}
	return list[0], nil
}

// FleetStates returns every fleet not deleted, ordered by name, without
// its game servers counted (FleetRow.Counts is zero): for a reader that
// counts them from the servers it has (the controller), where the count
// joins every game server.
func (v *Views) FleetStates(ctx context.Context) ([]projections.FleetRow, error) {
	rows, err := v.pool.Query(ctx, `SELECT snapshot, last_sequence FROM fleets WHERE NOT deleted ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("views: fleet states: %w", err)
	}
	states, err := scanRows[*eventsv1.FleetState](rows)
	if err != nil {
		return nil, err
	}
	out := make([]projections.FleetRow, len(states))
	for i, r := range states {
		out[i] = projections.FleetRow{Row: r}
	}
	return out, nil
}

func scanFleets(rows pgx.Rows) ([]projections.FleetRow, error) {
	defer rows.Close()
	var out []projections.FleetRow
	for rows.Next() {
		var snap []byte
		var seq int64
		var c projections.FleetCounts
		if err := rows.Scan(&snap, &seq, &c.Ready, &c.Reserved, &c.Allocated, &c.Unhealthy, &c.Live); err != nil {
			return nil, fmt.Errorf("views: scan fleet: %w", err)
		}
		s := &eventsv1.FleetState{}
		if err := proto.Unmarshal(snap, s); err != nil {
			return nil, fmt.Errorf("views: decode fleet: %w", err)
		}
		out = append(out, projections.FleetRow{Row: projections.Row[*eventsv1.FleetState]{State: s, Sequence: uint64(seq)}, Counts: c})
	}
	return out, rows.Err()
}

// GameServer returns a game server or projections.ErrNotFound.
func (v *Views) GameServer(ctx context.Context, name string) (projections.Row[*eventsv1.GameServerState], error) {
	rows, err := v.pool.Query(ctx, gameServerQuery+` WHERE g.name = $1`, name)
	if err != nil {
		return projections.Row[*eventsv1.GameServerState]{}, fmt.Errorf("views: game server %s: %w", name, err)
	}
	list, err := scanGameServers(rows)
	if err != nil {
		return projections.Row[*eventsv1.GameServerState]{}, err
	}
	if len(list) == 0 {
		return projections.Row[*eventsv1.GameServerState]{}, fmt.Errorf("game server %s: %w", name, projections.ErrNotFound)
	}
	return list[0], nil
}

// ListGameServers returns game servers matching q, ordered by name.
func (v *Views) ListGameServers(ctx context.Context, q projections.GameServerQuery) ([]projections.Row[*eventsv1.GameServerState], error) {
	where, args := gameServerWhere(q)
	args = append(args, q.Limit)
	rows, err := v.pool.Query(ctx, fmt.Sprintf(gameServerQuery+` WHERE %s ORDER BY g.name LIMIT $%d`,
		strings.Join(where, " AND "), len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("views: list game servers: %w", err)
	}
	return scanGameServers(rows)
}

// CountGameServers counts the game servers matching q (its After and Limit
// aside).
func (v *Views) CountGameServers(ctx context.Context, q projections.GameServerQuery) (int, error) {
	q.After = ""
	where, args := gameServerWhere(q)
	var n int
	if err := v.pool.QueryRow(ctx, `SELECT count(*) FROM game_servers g WHERE `+strings.Join(where, " AND "), args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("views: count game servers: %w", err)
	}
	return n, nil
}

// gameServerWhere is the WHERE terms of q over game_servers g, and their
// arguments.
func gameServerWhere(q projections.GameServerQuery) (where []string, args []any) {
	where, args = []string{"g.name > $1"}, []any{q.After}
	for _, f := range []struct{ col, val string }{
		{"g.fleet", q.Fleet}, {"g.state", q.State}, {"g.host", q.Host}, {"g.health", q.Health}, {"g.connection", q.Connection},
		{"split_part(g.name, '/', 4)", q.ID},
	} {
		if f.val != "" {
			args = append(args, f.val)
			where = append(where, fmt.Sprintf("%s = $%d", f.col, len(args)))
		}
	}
	if q.Live {
		where = append(where, "g.state <> 'TERMINATED'")
	}
	return where, args
}

// gameServerQuery reads game servers with their host's status.
const gameServerQuery = `SELECT g.snapshot, g.last_sequence, coalesce(h.status, '') FROM game_servers g LEFT JOIN hosts h ON h.name = g.host`

// scanGameServers decodes game servers. While a server's host is
// UNREACHABLE or LOST, nothing is known of its SDK connection: the server is
// shown with connection UNKNOWN (its stored state keeps the last fact).
func scanGameServers(rows pgx.Rows) ([]projections.Row[*eventsv1.GameServerState], error) {
	defer rows.Close()
	var out []projections.Row[*eventsv1.GameServerState]
	for rows.Next() {
		var snap []byte
		var seq int64
		var hostStatus string
		if err := rows.Scan(&snap, &seq, &hostStatus); err != nil {
			return nil, fmt.Errorf("views: scan game server: %w", err)
		}
		s := &eventsv1.GameServerState{}
		if err := proto.Unmarshal(snap, s); err != nil {
			return nil, fmt.Errorf("views: decode game server: %w", err)
		}
		if (hostStatus == "UNREACHABLE" || hostStatus == "LOST") && s.GetLifecycle() != eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
			s.Connection = eventsv1.ConnectionState_CONNECTION_STATE_UNKNOWN
		}
		out = append(out, projections.Row[*eventsv1.GameServerState]{State: s, Sequence: uint64(seq)})
	}
	return out, rows.Err()
}

// GameServersChangedSince returns the game servers whose last event is
// after stream sequence after, TERMINATED ones included (so a reader that
// keeps the live servers in memory drops them), in sequence order. The
// projector commits in stream order, so a reader that asks again with the
// largest sequence it got misses no change.
func (v *Views) GameServersChangedSince(ctx context.Context, after uint64) ([]projections.Row[*eventsv1.GameServerState], error) {
	rows, err := v.pool.Query(ctx, `SELECT snapshot, last_sequence FROM game_servers WHERE last_sequence > $1 ORDER BY last_sequence`, int64(after))
	if err != nil {
		return nil, fmt.Errorf("views: game servers changed since %d: %w", after, err)
	}
	return scanRows[*eventsv1.GameServerState](rows)
}

// HostsChangedSince returns the hosts whose last event is after stream
// sequence after, in sequence order, without their servers counted: a
// reader that keeps the hosts in memory (the controller) counts them from
// the live servers it keeps, where a count per host in each read joined
// every game server.
func (v *Views) HostsChangedSince(ctx context.Context, after uint64) ([]projections.Row[*eventsv1.HostState], error) {
	rows, err := v.pool.Query(ctx, `SELECT snapshot, last_sequence FROM hosts WHERE last_sequence > $1 ORDER BY last_sequence`, int64(after))
	if err != nil {
		return nil, fmt.Errorf("views: hosts changed since %d: %w", after, err)
	}
	return scanRows[*eventsv1.HostState](rows)
}

// LiveGameServers returns every game server not yet TERMINATED, ordered by name.
func (v *Views) LiveGameServers(ctx context.Context) ([]projections.Row[*eventsv1.GameServerState], error) {
	rows, err := v.pool.Query(ctx, `SELECT snapshot, last_sequence FROM game_servers WHERE state <> 'TERMINATED' ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("views: live game servers: %w", err)
	}
	return scanRows[*eventsv1.GameServerState](rows)
}

const hostQuery = `SELECT h.snapshot, h.last_sequence, count(g.name) FILTER (WHERE g.state <> 'TERMINATED')
FROM hosts h LEFT JOIN game_servers g ON g.host = h.name`

// Hosts returns up to limit hosts whose names sort after the given name.
func (v *Views) Hosts(ctx context.Context, after string, limit int) ([]projections.HostRow, error) {
	rows, err := v.pool.Query(ctx, hostQuery+` WHERE h.name > $1 GROUP BY h.name ORDER BY h.name LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("views: hosts: %w", err)
	}
	return scanHosts(rows)
}

// Host returns a host or projections.ErrNotFound.
func (v *Views) Host(ctx context.Context, name string) (projections.HostRow, error) {
	rows, err := v.pool.Query(ctx, hostQuery+` WHERE h.name = $1 GROUP BY h.name`, name)
	if err != nil {
		return projections.HostRow{}, fmt.Errorf("views: host %s: %w", name, err)
	}
	list, err := scanHosts(rows)
	if err != nil {
		return projections.HostRow{}, err
	}
	if len(list) == 0 {
		return projections.HostRow{}, fmt.Errorf("host %s: %w", name, projections.ErrNotFound)
	}
	return list[0], nil
}

// MostGamePorts returns the most game ports any known host's agent hands
// out, whatever the host's status (a lost host may come back); 0 when no
// host has reported its port range.
func (v *Views) MostGamePorts(ctx context.Context) (int32, error) {
	var most int32
	if err := v.pool.QueryRow(ctx, `SELECT coalesce(max(game_ports), 0) FROM hosts`).Scan(&most); err != nil {
		return 0, fmt.Errorf("views: most game ports: %w", err)
	}
	return most, nil
}

func scanHosts(rows pgx.Rows) ([]projections.HostRow, error) {
	defer rows.Close()
	var out []projections.HostRow
	for rows.Next() {
		var snap []byte
		var seq int64
		var used int32
		if err := rows.Scan(&snap, &seq, &used); err != nil {
			return nil, fmt.Errorf("views: scan host: %w", err)
		}
		s := &eventsv1.HostState{}
		if err := proto.Unmarshal(snap, s); err != nil {
			return nil, fmt.Errorf("views: decode host: %w", err)
		}
		out = append(out, projections.HostRow{Row: projections.Row[*eventsv1.HostState]{State: s, Sequence: uint64(seq)}, Used: used})
	}
	return out, rows.Err()
}

func scanRows[S proto.Message](rows pgx.Rows) ([]projections.Row[S], error) {
	defer rows.Close()
	var out []projections.Row[S]
	for rows.Next() {
		var snap []byte
		var seq int64
		if err := rows.Scan(&snap, &seq); err != nil {
			return nil, fmt.Errorf("views: scan: %w", err)
		}
		var zero S
		s := zero.ProtoReflect().New().Interface().(S)
		if err := proto.Unmarshal(snap, s); err != nil {
			return nil, fmt.Errorf("views: decode snapshot: %w", err)
		}
		out = append(out, projections.Row[S]{State: s, Sequence: uint64(seq)})
	}
	return out, rows.Err()
}

// RequestSequence returns the stream sequence of the last event written for
// an API request id on an aggregate, or 0 if none is projected yet.
func (v *Views) RequestSequence(ctx context.Context, aggregate, requestID string) (uint64, error) {
	var seq int64
	err := v.pool.QueryRow(ctx, `SELECT max(sequence) FROM events WHERE request_id = $1 AND request_id <> '' AND aggregate = $2 HAVING max(sequence) IS NOT NULL`,
		requestID, aggregate).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("views: request %s: %w", requestID, err)
	}
	return uint64(seq), nil
}
