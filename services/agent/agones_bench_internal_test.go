package agent

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
)

// BenchmarkWatchUpdate is what one watch update costs the agent to
// encode, per SDK: Tether's (the GameServer in protobuf, over gRPC),
// Agones' over gRPC (its GameServer built from Tether's, in protobuf) and
// Agones' over REST or a WebSocket (the same in JSON), for a server with
// labels, annotations, a counter and a list (docs/benchmarks.md).
func BenchmarkWatchUpdate(b *testing.B) {
	ops := newStateOps(b)
	for _, cmd := range []events.GameServerCommand{
		events.SetLabels{Set: map[string]string{"agones.dev/sdk-mode": "ctf", "region": "eu-west"}},
		events.SetAnnotations{Set: map[string]string{"agones.dev/sdk-map": "dust"}},
		events.TrackPlayerConnect{PlayerID: "alice"},
	} {
		if err := ops.do(cmd); err != nil {
			b.Fatal(err)
		}
	}
	view := ops.GameServer(sdkCaller{})
	for _, enc := range []struct {
		name   string
		encode func() ([]byte, error)
	}{
		{"tether-grpc", func() ([]byte, error) { return proto.Marshal(view) }},
		{"agones-grpc", func() ([]byte, error) { return proto.Marshal(agonesGameServer(view)) }},
		{"agones-rest", func() ([]byte, error) { return agonesJSON.Marshal(agonesGameServer(view)) }},
	} {
		b.Run(enc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := enc.encode(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
