package agent

import (
	"context"

	"google.golang.org/grpc/peer"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

// connectedLocked records that a call with the process token arrived: the
// SDK is connected again, whatever the connection, and a grace window closes.
func (gs *gameServer) connectedLocked(ctx context.Context, transport string) {
	gs.connectedFromLocked(ctx, transport, remoteOf(ctx))
}

// connectedFromLocked is connectedLocked for a call from remote.
func (gs *gameServer) connectedFromLocked(ctx context.Context, transport, remote string) {
	if gs.check != nil {
		gs.check.connected()
	}
	if gs.state.GetConnection() == eventsv1.ConnectionState_CONNECTION_STATE_CONNECTED {
		return
	}
	if err := gs.recordLocked(ctx, events.RecordSDKConnected{Transport: transport, RemoteAddress: remote}); err != nil {
		gs.log.Warn("record SDK connected", "err", err)
	}
}

// noteCall handles any call carrying the token: it proves the SDK is
// connected, whatever the connection. Only Health calls are health pings
// (healthPing).
func (gs *gameServer) noteCall(ctx context.Context, transport string) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.connectedLocked(ctx, transport)
}

// streamOpened counts an SDK stream opened and notes the connection it
// proves without waiting for the server's lock: the stream's health pings,
// read only once this returns, are not held behind the server's appends
// (gameServer.healthPing).
func (gs *gameServer) streamOpened(ctx context.Context) {
	gs.streams.Add(1)
	gs.foldSoon(ctx, "grpc-stream", gs.a.opts.Clock.Now(), false)
}

// streamClosed records a disconnect, of the kind the closing stream ended
// with, when the last open SDK stream ends.
func (gs *gameServer) streamClosed(kind eventsv1.DisconnectKind, detail string) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.streams.Add(-1) > 0 || gs.state.GetLifecycle() == eventsv1.Lifecycle_LIFECYCLE_TERMINATED {
		return
	}
	if gs.a.stopping.Load() {
		// The agent ends the stream as it stops; the game server runs on
		// and its SDK reconnects to the next agent on the host.
		return
	}
	select {
	case <-gs.done:
		return // the process is gone; its exit is the story
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), finalEventTimeout)
	defer cancel()
	// A health ping's connection still pending came before this end: folded
	// first, it cannot undo the disconnect afterwards.
	gs.foldPendingLocked(ctx)
	if gs.streams.Load() > 0 {
		// A stream opened after this one's count went to zero (a reconnect
		// racing the close): the SDK is connected on it, and a disconnect
		// recorded now would stand while it is (the history showed two
		// disconnects in a row, TestReconnectingServerIsNeverKilled).
		return
	}
	now := gs.a.opts.Clock.Now()
	if gs.check != nil {
		gs.check.disconnected(now)
	}
	if err := gs.recordLocked(ctx, events.RecordSDKDisconnected{Kind: kind, At: now, Detail: detail}); err != nil {
		gs.log.Warn("record SDK disconnected", "err", err)
	}
}

func remoteOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok {
		return p.Addr.String()
	}
	return ""
}
