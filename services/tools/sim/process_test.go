package sim

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/agent"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// refusingSDK refuses a simulated process's first Ready calls, as an agent
// does when it cannot record them, and takes every other call.
type refusingSDK struct {
	processSDK // the calls this test does not expect: nil, so they fail loudly
	refuse     atomic.Int32
	readies    atomic.Int32
}

func (*refusingSDK) Connect(context.Context, string) (*agent.LocalConn, error) { return nil, nil }
func (*refusingSDK) Health(context.Context, string) error                      { return nil }

func (f *refusingSDK) Ready(context.Context, string) error {
	f.readies.Add(1)
	if f.refuse.Add(-1) >= 0 {
		return errors.New("the event store did not answer")
	}
	return nil
}

// A simulated server whose Ready the agent refuses says it again, as the
// example game server does, instead of staying STARTING for ever.
func TestASimulatedServerSaysReadyAgainAfterARefusal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := Options{}
	o.setDefaults()
	o.StartDelay, o.SlowStartFraction = 10*time.Millisecond, 0
	w := &world{opts: o, log: slog.New(slog.DiscardHandler), ctx: ctx, faults: newLedger()}
	sdk := &refusingSDK{}
	sdk.refuse.Store(2)
	h := &host{w: w, id: "h1", sdk: sdk}
	proc, err := h.Start(agent.ProcessSpec{GameServer: "fleets/f/gameServers/gs-1", Env: map[string]string{"TETHER_GAMESERVER_TOKEN": "token"}})
	if err != nil {
		t.Fatal(err)
	}
	p := proc.(*process)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		if _, err := p.Wait(); err != nil {
			t.Errorf("wait: %v", err)
		}
	}()
	wait.For(t, 10*time.Second, "the server to be READY after two refused Ready calls", p.ready.Load)
	if n := sdk.readies.Load(); n != 3 {
		t.Fatalf("%d Ready calls, want 3 (two refused, then taken)", n)
	}
	cancel()
	<-exited
}
