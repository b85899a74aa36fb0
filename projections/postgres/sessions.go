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

// AllocationCandidates returns the game servers matching q, best first.
// Without priorities: READY (or ALLOCATED) servers on the hosts with the
// most ALLOCATED servers (packed) or the fewest (distributed), cordoned
// hosts last, then by host and name; for one fleet, its newest revision's
// servers before the others (a rollout's outdated servers are the last
// allocated). It ranks hosts with two small aggregate queries and reads
// the rows of only as many hosts as the limit needs; a single join ranking
// every READY row left the plan at the mercy of the table's statistics (a
// nested loop over all of them when stale). With priorities, the servers'
// room comes first (rankedCandidates). A draining host's servers are never
// candidates: their fleets are moving them; nor are those of a host
// UNREACHABLE or LOST. Fewer than q.Limit rows are every server matching
// q, as of one snapshot of the views.
func (v *Views) AllocationCandidates(ctx context.Context, q projections.AllocationQuery) ([]projections.Row[*eventsv1.GameServerState], error) {
	match, args, err := allocationMatch(q)
	if err != nil {
		return nil, err
	}
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
	if q.Ranked() {
		return rankedCandidates(ctx, tx, q, match, args)
	}
	var hosts []*candidateHost
	byName := map[string]*candidateHost{}
	rows, err := tx.Query(ctx, `SELECT host, count(*) FROM game_servers WHERE `+match+` GROUP BY host`, args...)
	if err != nil {
		return nil, fmt.Errorf("views: allocation candidates: %w", err)
	}
	for rows.Next() {
		h := &candidateHost{}
		if err := rows.Scan(&h.name, &h.matching); err != nil {
			rows.Close()
			return nil, fmt.Errorf("views: allocation candidates: %w", err)
		}
		hosts = append(hosts, h)
		byName[h.name] = h
	}
	if err := rows.Err(); err != nil || len(hosts) == 0 {
		return nil, err
	}
	if err := loadHosts(ctx, tx, byName); err != nil {
		return nil, err
	}
	slices.SortFunc(hosts, func(a, b *candidateHost) int { return a.compare(q.Distributed, b) })
	var pick []string
	rank := map[string]int{}
	for n := 0; n < q.Limit && len(pick) < len(hosts); {
		h := hosts[len(pick)]
		rank[h.name] = len(pick)
		pick = append(pick, h.name)
		n += h.matching
	}
	// The picked hosts hold at least Limit rows, and at most one host's more.
	rows, err = tx.Query(ctx, `SELECT snapshot, last_sequence FROM game_servers WHERE `+match+` AND host = ANY($`+fmt.Sprint(len(args)+1)+`)
ORDER BY host, name`, append(args, pick)...)
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

// rankedCandidates is AllocationCandidates for a query with priorities:
// the servers with the least room left on the first priority's counter or
// list first (ascending; the most, descending), and so on, so that a
// packed fleet fills each server's rooms before it opens the next one's
// (where Agones ranks nodes first, and spreads matches over half-empty
// servers). Hosts break the ties as they rank without priorities, and a
// cordoned host's servers come last whatever their room.
func rankedCandidates(ctx context.Context, tx pgx.Tx, q projections.AllocationQuery, match string, args []any) ([]projections.Row[*eventsv1.GameServerState], error) {
	var order []string
	for _, p := range q.Priorities {
		args = append(args, p.Key)
		k := fmt.Sprint("$", len(args))
		room := fmt.Sprintf("(counters->%[1]s->>'capacity')::bigint - (counters->%[1]s->>'count')::bigint", k)
		if p.List {
			room = fmt.Sprintf("(lists->%[1]s->>'capacity')::bigint - jsonb_array_length(lists->%[1]s->'values')", k)
		}
		dir := "ASC"
		if p.Descending {
			dir = "DESC"
		}
		order = append(order, room+" "+dir+" NULLS LAST")
	}
	args = append(args, q.Limit)
	rows, err := tx.Query(ctx, `SELECT snapshot, last_sequence FROM game_servers WHERE `+match+`
ORDER BY `+strings.Join(order, ", ")+`, name LIMIT $`+fmt.Sprint(len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("views: allocation candidates: %w", err)
	}
	out, err := scanRows[*eventsv1.GameServerState](rows)
	if err != nil || len(out) == 0 {
		return nil, err
	}
	byName := map[string]*candidateHost{}
	for _, r := range out {
		byName[r.State.GetHost()] = &candidateHost{name: r.State.GetHost()}
	}
	if err := loadHosts(ctx, tx, byName); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b projections.Row[*eventsv1.GameServerState]) int {
		ha, hb := byName[a.State.GetHost()], byName[b.State.GetHost()]
		if ha.cordoned != hb.cordoned {
			return map[bool]int{true: 1, false: -1}[ha.cordoned]
		}
		if c := q.ComparePriorities(a.State, b.State); c != 0 {
			return c
		}
		if q.Fleet != "" {
			if c := cmp.Compare(b.State.GetRevision(), a.State.GetRevision()); c != 0 {
				return c
			}
		}
		return ha.compare(q.Distributed, hb)
	})
	return out, nil
}

// candidateHost is a host of allocation candidates as ranked: how many of
// its servers match, how many are ALLOCATED, and whether it is cordoned.
type candidateHost struct {
	name           string
	matching, busy int
	cordoned       bool
}

// compare orders hosts for allocation: cordoned ones last, then by
// events.CompareHosts on their ALLOCATED servers.
func (a *candidateHost) compare(distributed bool, b *candidateHost) int {
	if a.cordoned != b.cordoned {
		return map[bool]int{true: 1, false: -1}[a.cordoned]
	}
	return events.CompareHosts(distributed, events.HostLoad{Name: a.name, Load: a.busy}, events.HostLoad{Name: b.name, Load: b.busy})
}

// loadHosts reads the ALLOCATED servers and the cordon of the hosts of
// byName into them.
func loadHosts(ctx context.Context, tx pgx.Tx, byName map[string]*candidateHost) error {
	names := slices.Collect(maps.Keys(byName))
	rows, err := tx.Query(ctx, `SELECT host, count(*) FROM game_servers WHERE state = 'ALLOCATED' AND host = ANY($1) GROUP BY host`, names)
	if err != nil {
		return fmt.Errorf("views: allocation candidates: %w", err)
	}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			rows.Close()
			return fmt.Errorf("views: allocation candidates: %w", err)
		}
		byName[name].busy = n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = tx.Query(ctx, `SELECT name FROM hosts WHERE name = ANY($1) AND cordoned`, names)
	if err != nil {
		return fmt.Errorf("views: allocation candidates: %w", err)
	}
	cordoned, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("views: allocation candidates: %w", err)
	}
	for _, name := range cordoned {
		byName[name].cordoned = true
	}
	return nil
}

// allocationMatch is the WHERE clause of the servers q matches, and its
// arguments: the state, the fleet, the labels, then each counter and list
// bound in name order (equal queries are the same text).
//
// A READY row whose last event precedes its host's last registration
// belongs to an agent that has since restarted: nobody supervises its
// process any more, and the controller is about to terminate it
// (AGENT_RESTARTED). It is never a candidate. Nor is a server on a host
// the control plane cannot hear (UNREACHABLE or LOST): its agent would not
// hear of the allocation, and its game would refuse the players; a lost
// host's servers are about to end.
func allocationMatch(q projections.AllocationQuery) (string, []any, error) {
	labels := q.MatchLabels
	if labels == nil {
		labels = map[string]string{} // not JSON null, which contains nothing
	}
	raw, err := json.Marshal(labels)
	if err != nil {
		return "", nil, fmt.Errorf("views: labels: %w", err)
	}
	state := "READY"
	if q.Allocated {
		state = "ALLOCATED"
	}
	args := []any{state, q.Fleet, raw}
	var b strings.Builder
	b.WriteString(`state = $1 AND ($2 = '' OR fleet = $2) AND labels @> $3::jsonb
AND NOT EXISTS (SELECT 1 FROM hosts h WHERE h.name = game_servers.host
  AND (h.registered_sequence > game_servers.last_sequence OR h.draining OR h.status IN ('UNREACHABLE', 'LOST')))`)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprint("$", len(args))
	}
	bound := func(expr string, lo, hi int64) {
		if lo > 0 {
			fmt.Fprintf(&b, " AND %s >= %s", expr, arg(lo))
		}
		if hi > 0 {
			fmt.Fprintf(&b, " AND %s <= %s", expr, arg(hi))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(q.Counters)) {
		c := q.Counters[name]
		k := arg(name)
		count := fmt.Sprintf("(counters->%s->>'count')::bigint", k)
		fmt.Fprintf(&b, "\nAND counters ? %s", k)
		bound(count, c.MinCount, c.MaxCount)
		bound(fmt.Sprintf("(counters->%s->>'capacity')::bigint - %s", k, count), c.MinAvailable, c.MaxAvailable)
	}
	if p := q.Players; p != nil && (p.MinAvailable > 0 || p.MaxAvailable > 0) {
		// NULL: a row from before the column; the allocator checks the
		// server's state (AllocationQuery.Matches) before it tries it.
		b.WriteString("\nAND (players_available IS NULL OR (true")
		bound("players_available", p.MinAvailable, p.MaxAvailable)
		b.WriteString("))")
	}
	for _, name := range slices.Sorted(maps.Keys(q.Lists)) {
		l := q.Lists[name]
		k := arg(name)
		fmt.Fprintf(&b, "\nAND lists ? %s", k)
		bound(fmt.Sprintf("(lists->%[1]s->>'capacity')::bigint - jsonb_array_length(lists->%[1]s->'values')", k), l.MinAvailable, l.MaxAvailable)
		if l.ContainsValue != "" {
			fmt.Fprintf(&b, " AND lists->%s->'values' ? %s", k, arg(l.ContainsValue))
		}
	}
	return b.String(), args, nil
}

// AllocationByRequest returns the game server and stream sequence of the
// projected GameServerAllocated, or GameServerReallocated (another match
// on a running server), written for an allocation request id, or
// ok=false.
func (v *Views) AllocationByRequest(ctx context.Context, requestID string) (gameServer string, seq uint64, ok bool, err error) {
	var s int64
	err = v.pool.QueryRow(ctx, `SELECT aggregate, sequence FROM events
WHERE request_id = $1 AND request_id <> '' AND type IN ('GameServerAllocated', 'GameServerReallocated') ORDER BY sequence LIMIT 1`,
		requestID).Scan(&gameServer, &s)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("views: allocation request %s: %w", requestID, err)
	}
	return gameServer, uint64(s), true, nil
}
