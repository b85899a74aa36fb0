package hostbeat_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/nats/hostbeat"
)

// A server's last SDK heartbeat travels as Unix milliseconds: it comes
// back to the millisecond, an unknown one stays zero, and it costs a beat
// little: a host's beat lists every server every couple of seconds.
func TestServerLastHeartbeat(t *testing.T) {
	at := time.Date(2026, 11, 26, 17, 0, 0, 123_456_789, time.UTC)
	servers := make([]hostbeat.Server, 10)
	bare := make([]hostbeat.Server, 10)
	for i := range servers {
		name := fmt.Sprintf("fleets/arena/gameServers/gs-%02d", i)
		servers[i] = hostbeat.Server{Name: name, Pid: 1000 + i, LastHeartbeatMs: at.UnixMilli()}
		bare[i] = hostbeat.Server{Name: name, Pid: 1000 + i}
	}
	with, err := json.Marshal(hostbeat.Inventory{Servers: servers})
	if err != nil {
		t.Fatal(err)
	}
	without, err := json.Marshal(hostbeat.Inventory{Servers: bare})
	if err != nil {
		t.Fatal(err)
	}
	if per := (len(with) - len(without)) / len(servers); per > 20 {
		t.Errorf("the heartbeat costs %d bytes a server in a beat, want at most 20", per)
	}
	var back hostbeat.Inventory
	if err := json.Unmarshal(with, &back); err != nil {
		t.Fatal(err)
	}
	if got, want := back.Servers[3].LastHeartbeat(), at.Truncate(time.Millisecond); !got.Equal(want) {
		t.Errorf("read back %s, want %s", got, want)
	}
	if got := (hostbeat.Server{Name: "x"}).LastHeartbeat(); !got.IsZero() {
		t.Errorf("an unknown heartbeat reads %s, want zero", got)
	}
}
