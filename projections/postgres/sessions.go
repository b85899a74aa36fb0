package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// GameSession returns a game session (with its player sessions) or
// projections.ErrNotFound.
func (v *Views) GameSession(ctx context.Context, name string) (projections.Row[*eventsv1.GameSessionState], error) {
	rows, err := v.pool.Query(ctx, `SELECT snapshot, last_sequence FROM game_sessions WHERE name = $1`, name)
	if err != nil {
		return projections.Row[*eventsv1.GameSessionState]{}, fmt.Errorf("views: game session %s: %w", name, err)
	}
	list, err := scanRows[*eventsv1.GameSessionState](rows)
	if err != nil {
		return projections.Row[*eventsv1.GameSessionState]{}, err
	}
	if len(list) == 0 {
		return projections.Row[*eventsv1.GameSessionState]{}, fmt.Errorf("game session %s: %w", name, projections.ErrNotFound)
	}
	return list[0], nil
}

// ListGameSessions returns game sessions matching q, newest first.
func (v *Views) ListGameSessions(ctx context.Context, q projections.GameSessionQuery) ([]projections.Row[*eventsv1.GameSessionState], error) {
	var where []string
	var args []any
	add := func(cond string, val any) {
		args = append(args, val)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if q.State != "" {
		add("state = $%d", q.State)
	}
	if q.GameServer != "" {
		add("game_server = $%d", q.GameServer)
	}
	if q.Fleet != "" {
		add("fleet = $%d", q.Fleet)
	}
	if q.AfterName != "" {
		args = append(args, q.AfterTime, q.AfterName)
		where = append(where, fmt.Sprintf("(create_time, name) < ($%d, $%d)", len(args)-1, len(args)))
	}
	sql := `SELECT snapshot, last_sequence FROM game_sessions`
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, q.Limit)
	rows, err := v.pool.Query(ctx, sql+fmt.Sprintf(" ORDER BY create_time DESC, name DESC LIMIT $%d", len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("views: list game sessions: %w", err)
	}
	return scanRows[*eventsv1.GameSessionState](rows)
}

// DueGameSessions returns ACTIVE game sessions with a reservation or
// reconnect deadline at or before now, at most limit of them.
func (v *Views) DueGameSessions(ctx context.Context, now time.Time, limit int) ([]projections.Row[*eventsv1.GameSessionState], error) {
	rows, err := v.pool.Query(ctx, `SELECT snapshot, last_sequence FROM game_sessions
WHERE next_deadline IS NOT NULL AND next_deadline <= $1 AND state = 'ACTIVE' ORDER BY next_deadline LIMIT $2`, now, limit)
	if err != nil {
		return nil, fmt.Errorf("views: due game sessions: %w", err)
	}
	return scanRows[*eventsv1.GameSessionState](rows)
}

// OrphanedGameSessions returns ACTIVE game sessions whose game server no
// longer runs them (it was re-Readied, shut down, failed or terminated):
// the controller ends them with the server's reason.
func (v *Views) OrphanedGameSessions(ctx context.Context, limit int) ([]projections.Row[*eventsv1.GameSessionState], error) {
	rows, err := v.pool.Query(ctx, `SELECT s.snapshot, s.last_sequence FROM game_sessions s
LEFT JOIN game_servers g ON g.name = s.game_server
WHERE s.state = 'ACTIVE' AND (g.name IS NULL OR g.game_session <> s.name OR g.state <> 'ALLOCATED')
ORDER BY s.create_time LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("views: orphaned game sessions: %w", err)
	}
	return scanRows[*eventsv1.GameSessionState](rows)
}

// UncreatedGameSessions returns ALLOCATED game servers whose game session
// is not in the views although the allocation is older than olderThan: the
// allocator stopped between its two appends, and the controller finishes
// its work.
func (v *Views) UncreatedGameSessions(ctx context.Context, olderThan time.Time, limit int) ([]projections.Row[*eventsv1.GameServerState], error) {
	rows, err := v.pool.Query(ctx, `SELECT g.snapshot, g.last_sequence FROM game_servers g
WHERE g.state = 'ALLOCATED' AND g.game_session <> '' AND g.update_time < $1
  AND NOT EXISTS (SELECT 1 FROM game_sessions s WHERE s.name = g.game_session)
ORDER BY g.name LIMIT $2`, olderThan, limit)
	if err != nil {
		return nil, fmt.Errorf("views: uncreated game sessions: %w", err)
	}
	return scanRows[*eventsv1.GameServerState](rows)
}

// AllocationCandidates returns READY game servers matching q, best first:
// on the hosts with the most ALLOCATED servers (packed) or the fewest
// (distributed), cordoned hosts last, then by host and name; for one
// fleet, its newest revision's servers before the others (a rollout's
// outdated servers are the last allocated). A draining host's servers are
// never candidates: their fleets are moving them; nor are those of a host
// UNREACHABLE or LOST. It ranks hosts with two small
// aggregate queries and reads the rows of only as many hosts as the limit
// needs; a single join ranking every READY row left the plan at the mercy
// of the table's statistics (a nested loop over all of them when stale).
// Fewer than q.Limit rows are every READY server matching q, as of one
// snapshot of the views.
func (v *Views) AllocationCandidates(ctx context.Context, q projections.AllocationQuery) ([]projections.Row[*eventsv1.GameServerState], error) {
	if q.MatchLabels == nil {
		q.MatchLabels = map[string]string{} // not JSON null, which contains nothing
	}
	labels, err := json.Marshal(q.MatchLabels)
	if err != nil {
		return nil, fmt.Errorf("views: labels: %w", err)
	}
	// A READY row whose last event precedes its host's last registration
	// belongs to an agent that has since restarted: nobody supervises its
	// process any more, and the controller is about to terminate it
	// (AGENT_RESTARTED). It is never a candidate.
	// Nor is a server on a host the control plane cannot hear (UNREACHABLE
	// or LOST): its agent would not hear of the allocation, and its game
	// would refuse the players; a lost host's servers are about to end.
	const match = `state = 'READY' AND ($1 = '' OR fleet = $1) AND labels @> $2::jsonb
AND NOT EXISTS (SELECT 1 FROM hosts h WHERE h.name = game_servers.host
  AND (h.registered_sequence > game_servers.last_sequence OR h.draining OR h.status IN ('UNREACHABLE', 'LOST')))`
	// One snapshot for the counts and the rows: the rows are read only from
	// the hosts whose counts add up to Limit, and a caller takes fewer than
	// Limit rows to mean every candidate there is. Read apart, servers that
	// left READY between the two reads (this replica's own allocations,
	// projected meanwhile) made the picked hosts return fewer than Limit
	// while READY servers waited on the hosts not picked: the allocator
	// answered NO_READY_GAME_SERVER with a whole host READY.
	tx, err := v.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("views: allocation candidates: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only: nothing to undo, and a failed rollback ends the connection's transaction anyway
	type host struct {
		name        string
		ready, busy int
		cordoned    bool
	}
	var hosts []*host
	byName := map[string]*host{}
	rows, err := tx.Query(ctx, `SELECT host, count(*) FROM game_servers WHERE `+match+` GROUP BY host`, q.Fleet, labels)
	if err != nil {
		return nil, fmt.Errorf("views: allocation candidates: %w", err)
	}
	for rows.Next() {
		h := &host{}
		if err := rows.Scan(&h.name, &h.ready); err != nil {
			rows.Close()
			return nil, fmt.Errorf("views: allocation candidates: %w", err)
		}
		hosts = append(hosts, h)
		byName[h.name] = h
	}
	if err := rows.Err(); err != nil || len(hosts) == 0 {
		return nil, err
	}
	names := slices.Collect(maps.Keys(byName))
	rows, err = tx.Query(ctx, `SELECT host, count(*) FROM game_servers WHERE state = 'ALLOCATED' AND host = ANY($1) GROUP BY host`, names)
	if err != nil {
		return nil, fmt.Errorf("views: allocation candidates: %w", err)
	}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("views: allocation candidates: %w", err)
		}
		byName[name].busy = n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, `SELECT name FROM hosts WHERE name = ANY($1) AND cordoned`, names)
	if err != nil {
		return nil, fmt.Errorf("views: allocation candidates: %w", err)
	}
	cordoned, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("views: allocation candidates: %w", err)
	}
	for _, name := range cordoned {
		byName[name].cordoned = true
	}
	slices.SortFunc(hosts, func(a, b *host) int {
		if a.cordoned != b.cordoned {
			return map[bool]int{true: 1, false: -1}[a.cordoned]
		}
		return events.CompareHosts(q.Distributed, events.HostLoad{Name: a.name, Load: a.busy}, events.HostLoad{Name: b.name, Load: b.busy})
	})
	var pick []string
	rank := map[string]int{}
	for n := 0; n < q.Limit && len(pick) < len(hosts); {
		h := hosts[len(pick)]
		rank[h.name] = len(pick)
		pick = append(pick, h.name)
		n += h.ready
	}
	// The picked hosts hold at least Limit rows, and at most one host's more.
	rows, err = tx.Query(ctx, `SELECT snapshot, last_sequence FROM game_servers WHERE `+match+` AND host = ANY($3)
ORDER BY host, name`, q.Fleet, labels, pick)
	if err != nil {
		return nil, fmt.Errorf("views: allocation candidates: %w", err)
	}
	out, err := scanRows[*eventsv1.GameServerState](rows)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b projections.Row[*eventsv1.GameServerState]) int {
		if q.Fleet != "" {
			// A fleet's newest revision first: during a rollout, matches go
			// to the new servers and the outdated ones are free to go.
			if c := cmp.Compare(b.State.GetRevision(), a.State.GetRevision()); c != 0 {
				return c
			}
		}
		return cmp.Compare(rank[a.State.GetHost()], rank[b.State.GetHost()])
	})
	return out[:min(len(out), q.Limit)], nil
}

// AllocationByRequest returns the game server and stream sequence of the
// projected GameServerAllocated written for an allocation request id, or
// ok=false.
func (v *Views) AllocationByRequest(ctx context.Context, requestID string) (gameServer string, seq uint64, ok bool, err error) {
	var s int64
	err = v.pool.QueryRow(ctx, `SELECT aggregate, sequence FROM events
WHERE request_id = $1 AND request_id <> '' AND type = 'GameServerAllocated' ORDER BY sequence LIMIT 1`,
		requestID).Scan(&gameServer, &s)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("views: allocation request %s: %w", requestID, err)
	}
	return gameServer, uint64(s), true, nil
}
