package postgres_test

import (
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/projections/postgres"
	"github.com/tetherhq/tether/services/testkit/wait"
)

func TestCheckReportsCorruptedRows(t *testing.T) {
	e := newEnv(t)
	e.scenario(5)
	pool := e.pool()
	live := e.projector(pool, "live", time.Minute, 7)
	e.runLive(live)
	want := e.lastSeq()
	// Check compares at the live checkpoint, whatever it is: the clean check
	// can only promise the whole stream once the live views have all of it.
	wait.For(t, 20*time.Second, "the live views", func() bool { return live.Checkpoint() >= want })
	check := func() postgres.CheckReport {
		t.Helper()
		rep, err := postgres.Check(e.ctx, postgres.ReplayOptions{Pool: pool, JetStream: e.js, BatchSize: 7})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := check()
	if len(rep.Differences) != 0 || rep.Sequence != want || rep.Rows == 0 {
		t.Fatalf("clean check: %+v", rep)
	}

	// Corrupt the live views: a changed row, a lost row, an invented row.
	for _, sql := range []string{
		`UPDATE game_servers SET state = 'READY', snapshot = snapshot || '\x00'::bytea WHERE name = 'fleets/arena/gameServers/gs-3'`,
		`DELETE FROM hosts WHERE name = 'hosts/h1'`,
		`INSERT INTO fleets SELECT 'fleets/ghost', replicas, scheduling, labels, deleted, create_time, update_time, snapshot, last_sequence FROM fleets WHERE name = 'fleets/arena'`,
		`UPDATE events SET producer = 'forged' WHERE sequence = 3`,
	} {
		if _, err := pool.Exec(e.ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	rep = check()
	got := map[string]postgres.Difference{}
	for _, d := range rep.Differences {
		got[d.Table+" "+d.Key] = d
	}
	wantDiffs := []postgres.Difference{
		{Table: "game_servers", Key: "fleets/arena/gameServers/gs-3", Kind: postgres.DiffDifferent, Columns: []string{"state", "snapshot"}},
		{Table: "hosts", Key: "hosts/h1", Kind: postgres.DiffMissing},
		{Table: "fleets", Key: "fleets/ghost", Kind: postgres.DiffExtra},
		{Table: "events", Key: "3", Kind: postgres.DiffDifferent, Columns: []string{"producer"}},
	}
	if len(rep.Differences) != len(wantDiffs) {
		t.Errorf("differences: %+v", rep.Differences)
	}
	for _, w := range wantDiffs {
		g, ok := got[w.Table+" "+w.Key]
		if !ok || g.Kind != w.Kind || !slices.Equal(g.Columns, w.Columns) {
			t.Errorf("difference %+v: got %+v", w, g)
		}
	}
}
