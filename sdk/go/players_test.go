package sdk_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sdkv1 "github.com/tetherhq/tether/proto/tether/sdk/v1"
	sdk "github.com/tetherhq/tether/sdk/go"
)

// The fake agent's seat is held by connection 2: reports about connection
// 1 are stale; reports naming no connection (0) apply to the seat.
const currentConnection = 2

// fakeDeadline is the reconnect deadline the fake agent answers.
var fakeDeadline = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func (fa *fakeAgent) AcceptPlayer(_ context.Context, req *sdkv1.AcceptPlayerRequest) (*sdkv1.AcceptPlayerResponse, error) {
	return &sdkv1.AcceptPlayerResponse{PlayerId: "p1", Connection: currentConnection, Reconnected: true, TakenOver: true}, nil
}

func (fa *fakeAgent) DisconnectPlayer(_ context.Context, req *sdkv1.DisconnectPlayerRequest) (*sdkv1.DisconnectPlayerResponse, error) {
	if c := req.GetConnection(); c != 0 && c != currentConnection {
		return &sdkv1.DisconnectPlayerResponse{Stale: true}, nil
	}
	return &sdkv1.DisconnectPlayerResponse{ReconnectDeadline: timestamppb.New(fakeDeadline)}, nil
}

func (fa *fakeAgent) RemovePlayer(_ context.Context, req *sdkv1.RemovePlayerRequest) (*sdkv1.RemovePlayerResponse, error) {
	c := req.GetConnection()
	return &sdkv1.RemovePlayerResponse{Stale: c != 0 && c != currentConnection}, nil
}

// The connection AcceptPlayer numbers goes back with the player's
// disconnect and removal, and the agent's stale answer comes back out.
func TestPlayerConnections(t *testing.T) {
	fa := startFakeAgent(t)
	c := connect(t, fa, sdk.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := c.AcceptPlayer(ctx, "ps-1", "token")
	if err != nil || p.GetConnection() != currentConnection || !p.GetTakenOver() {
		t.Fatalf("AcceptPlayer = %v, %v; want connection %d, taken over", p, err, currentConnection)
	}
	tests := []struct {
		name       string
		connection int64
		stale      bool
	}{
		{"the connection holding the seat", currentConnection, false},
		{"an earlier connection", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deadline, stale, err := c.DisconnectPlayerConnection(ctx, "ps-1", tt.connection)
			if err != nil || stale != tt.stale || (!stale && !deadline.Equal(fakeDeadline)) || (stale && !deadline.IsZero()) {
				t.Fatalf("DisconnectPlayerConnection = %v, %v, %v; want stale %v", deadline, stale, err, tt.stale)
			}
			if stale, err := c.RemovePlayerConnection(ctx, "ps-1", tt.connection); err != nil || stale != tt.stale {
				t.Fatalf("RemovePlayerConnection = %v, %v; want stale %v", stale, err, tt.stale)
			}
		})
	}
	// Without a connection: whichever holds the seat.
	if deadline, err := c.DisconnectPlayer(ctx, "ps-1"); err != nil || !deadline.Equal(fakeDeadline) {
		t.Fatalf("DisconnectPlayer = %v, %v", deadline, err)
	}
	if err := c.RemovePlayer(ctx, "ps-1"); err != nil {
		t.Fatalf("RemovePlayer: %v", err)
	}
}
