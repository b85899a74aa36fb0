package dev_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/testkit/wait"
)

// A host's and a game server's last heartbeat, as the API shows them, keep
// up with the heartbeats (the agents' beats: every 2 s for hosts, every
// second for the example server's SDK heartbeat), not with the last event
// that recorded one: an ONLINE host used to read "heartbeat 9m ago".
func TestHeartbeatTimesAreCurrent(t *testing.T) {
	s := startStack(t, 1)
	if code := s.rest("POST", "/v1/fleets?fleetId=beats", fleetSpec(1, nil), nil); code != http.StatusOK {
		t.Fatalf("create fleet: %d", code)
	}
	var server string
	wait.For(t, 30*time.Second, "a READY server", func() bool {
		ready := byState(s.gameServers("beats"), "READY")
		if len(ready) == 1 {
			server = ready[0].Name
		}
		return server != ""
	})
	// From here on, no event about the host or the server is expected:
	// only beats can move their heartbeat times past this instant.
	quiet := time.Now().Add(3 * time.Second)
	wait.Until(t, 20*time.Second, "the host's and the server's heartbeat times to pass "+quiet.Format(time.RFC3339Nano), func() error {
		var host struct {
			State             string    `json:"state"`
			LastHeartbeatTime time.Time `json:"lastHeartbeatTime"`
		}
		if code := s.rest("GET", "/v1/hosts/h1", nil, &host); code != http.StatusOK {
			return fmt.Errorf("get host: %d", code)
		}
		var gs struct {
			Health struct {
				LastHeartbeatTime time.Time `json:"lastHeartbeatTime"`
			} `json:"health"`
		}
		if code := s.rest("GET", "/v1/"+server, nil, &gs); code != http.StatusOK {
			return fmt.Errorf("get server: %d", code)
		}
		var list struct {
			GameServers []struct {
				Health struct {
					LastHeartbeatTime time.Time `json:"lastHeartbeatTime"`
				} `json:"health"`
			} `json:"gameServers"`
		}
		if code := s.rest("GET", "/v1/fleets/beats/gameServers", nil, &list); code != http.StatusOK || len(list.GameServers) != 1 {
			return fmt.Errorf("list servers: %d, %d servers", code, len(list.GameServers))
		}
		switch {
		case host.State != "ONLINE":
			return fmt.Errorf("host %s", host.State)
		case host.LastHeartbeatTime.Before(quiet):
			return fmt.Errorf("host's last heartbeat %s", host.LastHeartbeatTime.Format(time.RFC3339Nano))
		case gs.Health.LastHeartbeatTime.Before(quiet):
			return fmt.Errorf("server's last heartbeat %s", gs.Health.LastHeartbeatTime.Format(time.RFC3339Nano))
		case list.GameServers[0].Health.LastHeartbeatTime.Before(quiet):
			return fmt.Errorf("listed server's last heartbeat %s", list.GameServers[0].Health.LastHeartbeatTime.Format(time.RFC3339Nano))
		}
		return nil
	})
}
