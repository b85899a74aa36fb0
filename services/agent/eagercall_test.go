package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
	"github.com/tetherhq/tether/services/agent"
)

// eagerProcesses starts real processes, then, before Start returns, calls
// the SDK with the new process's token, as a game server that connects the
// instant it runs does. It gives the call a moment to land: a heartbeat is
// answered at once, and the connection it proves must still be recorded
// after the process's start.
type eagerProcesses struct {
	agent.OSProcesses
	calls chan error
}

func (e eagerProcesses) Start(spec agent.ProcessSpec) (agent.Process, error) {
	p, err := e.OSProcesses.Start(spec)
	if err != nil {
		return nil, err
	}
	landed := make(chan struct{})
	go func() {
		defer close(landed)
		e.calls <- e.call(spec)
	}()
	// Not a wait for an outcome: the bound on how long a process may have
	// run before its start is recorded; an early call lands within it.
	select {
	case <-landed:
	case <-time.After(300 * time.Millisecond):
	}
	return p, nil
}

// call makes one Health call with the process's token.
func (e eagerProcesses) call(spec agent.ProcessSpec) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(spec.Env["TETHER_SDK_ADDR"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+spec.Env[agent.EnvToken])
	_, err = sdkv1.NewSDKServiceClient(conn).Health(ctx, &sdkv1.HealthRequest{})
	return err
}

// A game server that calls the SDK before the agent has recorded its start
// is connected once: ProcessStarted comes first in its history, then one
// SdkConnected, and later calls record nothing more. The agent used to
// record the early call's SdkConnected first; ProcessStarted then began the
// process's connection afresh, and its next call recorded a second connect
// without a disconnect between.
func TestProcessCallingTheSDKAtOnceIsConnectedOnce(t *testing.T) {
	calls := make(chan error, 1)
	h := newHarnessOpts(t, func(o *agent.Options) { o.Processes = eagerProcesses{calls: calls} })
	name := "fleets/arena/gameServers/gs-eager"
	h.schedule(name, &eventsv1.GameServerTemplate{Command: "/bin/sleep", Args: []string{"600"}})
	select {
	case err := <-calls:
		if err != nil {
			t.Fatalf("the process's first SDK call: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the process's first SDK call did not return")
	}
	started := h.waitEvent(name, "ProcessStarted").Data.(*eventsv1.ProcessStarted)

	// A second call, as the process's next heartbeat.
	conn, err := grpc.NewClient(h.agent.SDKAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(h.ctx, "authorization", "Bearer "+h.agent.ProcessToken(int(started.GetPid())))
	if _, err := sdkv1.NewSDKServiceClient(conn).Health(ctx, &sdkv1.HealthRequest{}); err != nil {
		t.Fatal(err)
	}

	// The heartbeat's connect is recorded by a background fold: wait for
	// it, then for nothing more.
	h.waitEvent(name, "SdkConnected")
	var steps []string
	for _, e := range h.history(name) {
		switch e.Type {
		case "ProcessStarted", "SdkConnected", "SdkDisconnected":
			steps = append(steps, e.Type)
		}
	}
	if got := strings.Join(steps, " "); got != "ProcessStarted SdkConnected" {
		t.Fatalf("history %s, want ProcessStarted SdkConnected", got)
	}
	if st := fold(t, h.history(name)); st.GetConnection() != eventsv1.ConnectionState_CONNECTION_STATE_CONNECTED {
		t.Fatalf("connection %s, want CONNECTED", st.GetConnection())
	}
}
