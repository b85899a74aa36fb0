package hostbeat

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// entry is a bucket entry as the watcher delivers it.
type entry struct {
	key     string
	value   []byte
	rev     uint64
	created time.Time
}

func (e entry) Bucket() string                  { return Bucket }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.value }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return e.created }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// benchBeat is the value of a beat of a host running servers game servers.
func benchBeat(b *testing.B, host, servers int, at time.Time) []byte {
	inv := &Inventory{}
	for i := range servers {
		inv.Servers = append(inv.Servers, Server{
			Name: fmt.Sprintf("fleets/arena/gameServers/gs-%05d%05d", host, i), Pid: 100000 + i, LastHeartbeatMs: at.UnixMilli() - int64(i),
		})
	}
	v, err := json.Marshal(Beat{Time: at, Inventory: inv})
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// BenchmarkTrackerApply is what a Tracker pays per beat it follows, the
// load of every reader of the bucket (the controller, each API replica):
// at 10,000 hosts beating every 2 s, 5,000 beats a second each. A beat
// lists TETHER_BENCH_SERVERS game servers (default 10: 100,000 servers on
// 10,000 hosts; 99 is a full host). Then, per beat read back, what it
// costs to use its inventory as the API does (one host's, on a GET).
// Reports bytes/beat.
func BenchmarkTrackerApply(b *testing.B) {
	servers := 10
	if v := os.Getenv("TETHER_BENCH_SERVERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			b.Fatalf("TETHER_BENCH_SERVERS=%q", v)
		}
		servers = n
	}
	const hosts = 10000
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	values := make([][]byte, hosts)
	for h := range values {
		values[h] = benchBeat(b, h, servers, at)
	}
	b.Run(fmt.Sprintf("apply/servers=%d", servers), func(b *testing.B) {
		t := &Tracker{beats: map[string]Beat{}, changed: make(chan struct{})}
		i := 0
		for b.Loop() {
			h := i % hosts
			// A fresh slice per entry, as the watcher's messages are.
			t.apply(entry{key: "h" + strconv.Itoa(h), value: append([]byte(nil), values[h]...), rev: uint64(i + 1), created: at})
			i++
		}
		b.ReportMetric(float64(len(values[0])), "bytes/beat")
	})
	b.Run(fmt.Sprintf("apply+inventory/servers=%d", servers), func(b *testing.B) {
		t := &Tracker{beats: map[string]Beat{}, changed: make(chan struct{})}
		i := 0
		for b.Loop() {
			h := i % hosts
			key := "h" + strconv.Itoa(h)
			t.apply(entry{key: key, value: append([]byte(nil), values[h]...), rev: uint64(i + 1), created: at})
			beat, _ := t.Latest(key)
			if inv := beat.Inv(); inv == nil || len(inv.Servers) != servers {
				b.Fatalf("inventory of %s: %+v", key, inv)
			}
			i++
		}
	})
}
