package events_test

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/events"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
)

func TestSessionCreatedFromAllocation(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	alloc := &eventsv1.GameServerAllocated{
		GameSession: "gameSessions/g1", Properties: map[string]string{"map": "dust"}, MaxPlayers: 8,
		Players: []*eventsv1.PlayerReservation{{PlayerSession: "ps-a", PlayerId: "a", Slot: 0}, {PlayerSession: "ps-b", PlayerId: "b", PlayerData: "x", Slot: 1}},
	}
	tests := []struct {
		name     string
		policy   *eventsv1.PlayerSessionPolicy
		deadline time.Time // zero: none
	}{
		{"reservations time out", &eventsv1.PlayerSessionPolicy{ReservationTimeoutSeconds: 60, ReconnectWindowSeconds: 120}, now.Add(time.Minute)},
		{"no reservation timeout", &eventsv1.PlayerSessionPolicy{ReconnectWindowSeconds: 120}, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := events.SessionCreated("fleets/f/gameServers/gs-1", "hosts/h1", alloc, tt.policy, now, "req-1")
			if c.GetGameServer() != "fleets/f/gameServers/gs-1" || c.GetAllocationRequestId() != "req-1" || c.GetPolicy().GetMaxPlayers() != 8 ||
				c.GetPolicy().GetReconnectWindowSeconds() != 120 || c.GetProperties()["map"] != "dust" || len(c.GetPlayers()) != 2 {
				t.Fatalf("created = %v", c)
			}
			for i, p := range c.GetPlayers() {
				r := alloc.GetPlayers()[i]
				if p.GetPlayerSession() != r.GetPlayerSession() || p.GetSlot() != r.GetSlot() || p.GetPlayerData() != r.GetPlayerData() {
					t.Errorf("seat %d = %v, from %v", i, p, r)
				}
				if got := p.GetReservationDeadline(); tt.deadline.IsZero() != (got == nil) || got != nil && !got.AsTime().Equal(tt.deadline) {
					t.Errorf("seat %d deadline = %v, want %v", i, got, tt.deadline)
				}
			}
			c.Properties["map"] = "changed"
			if alloc.GetProperties()["map"] != "dust" {
				t.Fatal("SessionCreated shares the allocation's properties")
			}
		})
	}
}
