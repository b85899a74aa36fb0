package agent_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/nats/hostbeat"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// The host heartbeat carries the agent's inventory (its servers with their
// pids, and nothing queued), and SkipHeartbeat pauses it.
func TestHeartbeatCarriesInventoryAndCanBePaused(t *testing.T) {
	var paused atomic.Bool
	h := newHarnessOpts(t, func(o *agent.Options) {
		o.HeartbeatInterval = 50 * time.Millisecond
		o.SkipHeartbeat = paused.Load
	})
	kv, err := hostbeat.Open(h.ctx, h.js)
	if err != nil {
		t.Fatal(err)
	}
	read := func() hostbeat.Beat {
		beats, err := hostbeat.Read(h.ctx, kv)
		if err != nil {
			t.Fatal(err)
		}
		return beats["h1"]
	}
	names := []string{"fleets/arena/gameServers/gs-inv-1", "fleets/arena/gameServers/gs-inv-2"}
	pids := map[string]int{}
	for _, n := range names {
		h.schedule(n, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
		pids[n] = int(h.waitEvent(n, "ProcessStarted").Data.(*eventsv1.ProcessStarted).GetPid())
	}
	wait.For(t, 10*time.Second, "a beat listing both servers with their pids", func() bool {
		inv := read().Inv()
		if inv == nil || inv.Queued != 0 || len(inv.Servers) != 2 {
			return false
		}
		for _, s := range inv.Servers {
			if pids[s.Name] != s.Pid {
				return false
			}
		}
		return true
	})

	// The control plane ends one server; the agent's sync stops its
	// process, and it leaves the inventory.
	gone := names[0]
	last := h.history(gone)
	msgs, err := events.DecideGameServer(gone, fold(t, last), events.Terminate{Reason: eventsv1.Reason_REASON_HOST_LOST})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Append(h.ctx, events.MustSubject(gone), last[len(last)-1].Sequence, events.New(gone, time.Now(), msgs[0])); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "a beat without the stopped server", func() bool {
		inv := read().Inv()
		return inv != nil && len(inv.Servers) == 1 && inv.Servers[0].Name == names[1]
	})

	// Paused: the stored beat stops advancing; resumed: it advances again.
	paused.Store(true)
	var stored time.Time
	wait.For(t, 10*time.Second, "beats to stop", func() bool {
		b := read()
		if b.Stored.Equal(stored) && time.Since(b.Stored) > 300*time.Millisecond {
			return true
		}
		stored = b.Stored
		return false
	})
	paused.Store(false)
	wait.For(t, 10*time.Second, "beats to resume", func() bool { return read().Stored.After(stored) })
}

// A heartbeat put that failed and moved the agent's connection to another
// NATS server (ObserveJetStream said so) is put again at once, not at the
// next beat: the host's heartbeat gap is the time to move, not that plus
// an interval. Here the first put fails for real (the bucket refuses a
// value that large) and the hook, as a move to a sound server, lifts the
// limit; the interval is an hour, so only the second put can store it.
// The hook is told when each put began.
func TestAHeartbeatThatMovedTheConnectionIsPutAgainAtOnce(t *testing.T) {
	k := kit.New(t, kit.WithCommands())
	st, err := k.JS.Stream(k.Ctx, "KV_"+hostbeat.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	limited := cfg
	limited.MaxMsgSize = 8
	if _, err := k.JS.UpdateStream(k.Ctx, limited); err != nil {
		t.Fatal(err)
	}
	type call struct {
		began time.Time
		err   error
	}
	var mu sync.Mutex
	var calls []call
	h := &harness{t: t, ctx: k.Ctx, js: k.JS, store: k.Store, bus: k.Commands}
	h.startAgent(func(o *agent.Options) {
		o.HeartbeatInterval = time.Hour
		o.ObserveJetStream = func(began time.Time, err error) bool {
			mu.Lock()
			calls = append(calls, call{began, err})
			first := len(calls) == 1
			mu.Unlock()
			if !first || err == nil {
				return false
			}
			if _, err := k.JS.UpdateStream(k.Ctx, cfg); err != nil {
				t.Error(err)
			}
			return true
		}
	})
	kv, err := hostbeat.Open(h.ctx, h.js)
	if err != nil {
		t.Fatal(err)
	}
	// The put is observed after it returns, so the beat can be in the
	// bucket a moment before its call is recorded (CI run 87 read one).
	wait.For(t, 10*time.Second, "h1's beat in the bucket and its put observed", func() bool {
		if _, err := kv.Get(h.ctx, "h1"); err != nil {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		return len(calls) >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 || calls[0].err == nil || calls[1].err != nil {
		t.Fatalf("puts observed: %+v, want one failed then one stored", calls)
	}
	if !calls[0].began.Before(calls[1].began) {
		t.Fatalf("the second put began at %s, not after the first (%s)", calls[1].began, calls[0].began)
	}
}
