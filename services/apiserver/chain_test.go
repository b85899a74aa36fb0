package apiserver

import (
	"strings"
	"testing"

	"github.com/tetherhq/tether/events"
)

// An explanation's chain starts after the last event that left the
// resource fine; a takeover (a player's new connection replacing their
// old one) is such an event, like an acceptance or a reconnect.
func TestChainStartsAfterTheLastSettlingEvent(t *testing.T) {
	for _, tt := range []struct {
		history []string
		want    string
	}{
		{[]string{"GameSessionCreated", "PlayerAccepted", "PlayerDisconnected", "PlayerTakenOver"}, "PlayerTakenOver"},
		{[]string{"GameSessionCreated", "PlayerAccepted", "PlayerDisconnected"}, "PlayerDisconnected"},
		{[]string{"GameServerScheduled", "ProcessStarted", "GameServerReady", "HealthDegraded", "GameServerUnhealthy"}, "HealthDegraded GameServerUnhealthy"},
		{[]string{"GameServerScheduled", "ProcessStarted", "GameServerReady"}, "GameServerReady"},
	} {
		evs := make([]events.Envelope, len(tt.history))
		for i, typ := range tt.history {
			evs[i] = events.Envelope{Type: typ}
		}
		var got []string
		for _, e := range chain(evs) {
			got = append(got, e.Type)
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("chain of %v = %v, want %s", tt.history, got, tt.want)
		}
	}
}
