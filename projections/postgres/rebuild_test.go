package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/postgres"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// runLive runs a projector in the background until the test ends.
func (e *env) runLive(p *postgres.Projector) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("live projector: %v", err)
		}
	})
}

// writer appends health events to two READY game servers every tick until
// stop is closed, returning how many it wrote.
func (e *env) writer(stop <-chan struct{}, errs *atomic.Int64) <-chan int {
	n := make(chan int, 1)
	go func() {
		tick := time.NewTicker(2 * time.Millisecond) // pacing a load, not waiting for an outcome
		defer tick.Stop()
		count := 0
		for {
			select {
			case <-stop:
				n <- count
				return
			case <-tick.C:
			}
			name := fmt.Sprintf("fleets/arena/gameServers/gs-%d", count%2)
			var p proto.Message = &eventsv1.HealthDegraded{MissedPeriods: 1, FailureThreshold: 3, PeriodSeconds: 5}
			if (count/2)%2 == 1 {
				p = &eventsv1.HealthRecovered{}
			}
			subject := events.MustSubject(name)
			last, err := e.store.LastSequence(e.ctx, subject)
			if err == nil {
				_, err = e.store.Append(e.ctx, subject, last, events.New(name, time.Now(), p))
			}
			if err != nil {
				errs.Add(1)
				continue
			}
			count++
		}
	}()
	return n
}

// readers query the views in a loop until stop is closed, counting reads,
// errors and empty answers.
type readers struct {
	reads, errs, empty atomic.Int64
	firstErr           atomic.Value
	wg                 sync.WaitGroup
}

func startReaders(ctx context.Context, pool *pgxpool.Pool, n int, stop <-chan struct{}) *readers {
	r := &readers{}
	v := postgres.NewViews(pool)
	for i := range n {
		r.wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				var size int
				var err error
				switch i % 4 {
				case 0:
					var l []projections.Row[*eventsv1.GameServerState]
					l, err = v.ListGameServers(ctx, projections.GameServerQuery{Fleet: "fleets/arena", Limit: 100})
					size = len(l)
				case 1:
					var l []projections.FleetRow
					l, err = v.ListFleets(ctx, "", 10)
					size = len(l)
				case 2:
					var l []projections.HostRow
					l, err = v.Hosts(ctx, "", 10)
					size = len(l)
				case 3:
					var f projections.FleetRow
					f, err = v.Fleet(ctx, "fleets/arena")
					size = int(f.Counts.Live)
				}
				r.reads.Add(1)
				if err != nil {
					r.errs.Add(1)
					r.firstErr.CompareAndSwap(nil, err.Error())
				} else if size == 0 {
					r.empty.Add(1)
				}
			}
		})
	}
	return r
}

func tableOID(t *testing.T, pool *pgxpool.Pool, table string) uint32 {
	t.Helper()
	var oid uint32
	if err := pool.QueryRow(context.Background(), `SELECT $1::regclass::oid`, table).Scan(&oid); err != nil {
		t.Fatal(err)
	}
	return oid
}

func TestRebuildWhileWritingAndReading(t *testing.T) {
	e := newEnv(t)
	e.scenario(30)
	pool := e.pool()
	live := e.projector(pool, "live", time.Minute, 50)
	e.runLive(live)
	want := e.lastSeq()
	wait.For(t, 20*time.Second, "the live views", func() bool { return live.Checkpoint() >= want })
	before := tableOID(t, pool, "game_servers")

	stop := make(chan struct{})
	var writeErrs atomic.Int64
	written := e.writer(stop, &writeErrs)
	rd := startReaders(e.ctx, pool, 8, stop)

	var phases []postgres.RebuildPhase
	res, err := postgres.Rebuild(e.ctx, postgres.ReplayOptions{
		Pool: pool, JetStream: e.js, BatchSize: 20, Logger: testLogger(),
		Progress: func(p postgres.RebuildProgress) {
			if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
				phases = append(phases, p.Phase)
			}
		},
	})
	if err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	// Keep reading and writing a little after the swap.
	readsAtSwap := rd.reads.Load()
	wait.For(t, 10*time.Second, "reads after the swap", func() bool { return rd.reads.Load() > readsAtSwap+200 })
	close(stop)
	rd.wg.Wait()
	n := <-written
	t.Logf("rebuild: %+v; phases %v; %d events written during it; %d reads", res, phases, n, rd.reads.Load())

	if got := rd.errs.Load(); got != 0 {
		t.Errorf("readers saw %d errors, first: %v", got, rd.firstErr.Load())
	}
	if got := rd.empty.Load(); got != 0 {
		t.Errorf("readers saw %d empty answers", got)
	}
	if writeErrs.Load() != 0 {
		t.Errorf("writer failed %d times", writeErrs.Load())
	}
	if n == 0 || readsAtSwap < 100 {
		t.Errorf("no overlap: %d events written, %d reads before the swap", n, readsAtSwap)
	}
	if after := tableOID(t, pool, "game_servers"); after == before {
		t.Error("game_servers was not swapped")
	}
	if want := []postgres.RebuildPhase{postgres.PhasePrepare, postgres.PhaseReplay, postgres.PhaseCatchUp, postgres.PhaseSwap, postgres.PhaseDone}; !sliceContainsInOrder(phases, want) {
		t.Errorf("phases %v, want %v in order", phases, want)
	}
	if res.Checkpoint < want {
		t.Errorf("rebuilt checkpoint %d < %d", res.Checkpoint, want)
	}

	// The live projector carries on from the rebuilt checkpoint.
	e.append("fleets/arena/gameServers/gs-0", &eventsv1.LabelsChanged{Set: map[string]string{"after": "rebuild"}})
	last := e.lastSeq()
	wait.For(t, 20*time.Second, "the live projector after the swap", func() bool { return live.Checkpoint() >= last })
	assertSameViews(t, pool, e.freshReplay())
	rep, err := postgres.Check(e.ctx, postgres.ReplayOptions{Pool: pool, JetStream: e.js, BatchSize: 50})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Differences) != 0 || rep.Sequence < last || rep.Rows == 0 {
		t.Errorf("check after the rebuild: %+v", rep)
	}
}

func sliceContainsInOrder[T comparable](got, want []T) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

func TestRebuildStopsOnPoison(t *testing.T) {
	e := newEnv(t)
	e.scenario(2)
	if _, err := e.js.Publish(e.ctx, "tether.ev.gs.arena.gs-0", []byte("not an envelope")); err != nil {
		t.Fatal(err)
	}
	e.append("fleets/arena/gameServers/gs-0", &eventsv1.LabelsChanged{Set: map[string]string{"after": "poison"}})
	pool := e.pool()
	live := e.projector(pool, "live", time.Minute, 7)
	e.run(live) // the live projector dead-letters it and carries on
	before := dump(t, pool)

	_, err := postgres.Rebuild(e.ctx, postgres.ReplayOptions{Pool: pool, JetStream: e.js, BatchSize: 7})
	pe, ok := errors.AsType[*postgres.PoisonError](err)
	if !ok {
		t.Fatalf("rebuild error = %v, want a *PoisonError", err)
	}
	if pe.Subject != "tether.ev.gs.arena.gs-0" || !errors.Is(err, events.ErrUndecodable) {
		t.Errorf("poison error %+v", pe)
	}
	t.Logf("rebuild stopped: %v", err)
	// The live views are untouched and the scratch schema is gone.
	after := dump(t, pool)
	for table, rows := range before {
		if fmt.Sprint(rows) != fmt.Sprint(after[table]) {
			t.Errorf("table %s changed", table)
		}
	}
	var n int
	if err := pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'tether_rebuild%'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("scratch schemas left: %d (%v)", n, err)
	}
}
