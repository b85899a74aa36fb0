package commands_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events/natsjs/jsclient"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/testkit/natstest"
)

// take fetches what a host's durable consumer has pending, acknowledging
// each command.
func take(t testing.TB, ctx context.Context, bus *commands.Bus, host string) []string {
	t.Helper()
	cons, err := bus.Consumer(ctx, host, 0)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(100, jetstream.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for m := range batch.Messages() {
		cmd, err := commands.Decode(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cmd.GetStart().GetGameServer())
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func start(name string) *agentv1.Command {
	return &agentv1.Command{Action: &agentv1.Command_Start{Start: &agentv1.StartGameServer{GameServer: name}}}
}

// Each host's consumer gets its own commands, each once: an acknowledged
// command is not delivered again, even to the consumer made anew after an
// agent restart, and the stream keeps commands for CommandTTL (limits
// retention, not a work queue: docs/scaling.md).
func TestEachCommandOnceToItsHost(t *testing.T) {
	ctx := t.Context()
	_, js := natstest.Connect(t, natstest.Start(t))
	bus, err := setUp(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ host, server string }{{"h1", "a"}, {"h2", "b"}, {"h1", "c"}} {
		if err := bus.Send(ctx, c.host, "test", start(c.server)); err != nil {
			t.Fatal(err)
		}
	}
	if got := take(t, ctx, bus, "h1"); fmt.Sprint(got) != "[a c]" {
		t.Fatalf("h1 got %v, want [a c]", got)
	}
	if got := take(t, ctx, bus, "h1"); len(got) != 0 {
		t.Fatalf("h1 got %v again after acknowledging them", got)
	}
	if got := take(t, ctx, bus, "h2"); fmt.Sprint(got) != "[b]" {
		t.Fatalf("h2 got %v, want [b]", got)
	}
	s, err := js.Stream(ctx, commands.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	if cfg.Retention != jetstream.LimitsPolicy || cfg.MaxAge != commands.CommandTTL || cfg.MaxConsumers != commands.MaxHosts {
		t.Fatalf("stream retention %s, max age %s, max consumers %d; want limits, %s, %d", cfg.Retention, cfg.MaxAge, cfg.MaxConsumers, commands.CommandTTL, commands.MaxHosts)
	}
}

// A host's consumer keeps its state in memory. One the stream lacks is
// made delivering from the sequence asked; one the stream has is used as
// it is, whatever sequence is asked; and one an earlier version kept in
// files is replaced by one in memory that delivers from its first
// unacknowledged command, so no command is lost or delivered twice.
func TestConsumerStateIsInMemoryAndMadeAnewFromASequence(t *testing.T) {
	ctx := t.Context()
	_, js := natstest.Connect(t, natstest.Start(t))
	bus, err := setUp(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		if err := bus.Send(ctx, "h1", "test", start(name)); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := bus.Consumer(ctx, "h1", 2)
	if err != nil {
		t.Fatal(err)
	}
	if !cons.CachedInfo().Config.MemoryStorage {
		t.Fatal("the consumer keeps its state in files")
	}
	if got := take(t, ctx, bus, "h1"); fmt.Sprint(got) != "[b c]" {
		t.Fatalf("a consumer made from sequence 2 delivered %v, want [b c]", got)
	}
	again, err := bus.Consumer(ctx, "h1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !again.CachedInfo().Created.Equal(cons.CachedInfo().Created) {
		t.Fatal("an existing consumer was made anew")
	}

	stream, err := js.Stream(ctx, commands.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	old, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{ // as an earlier version made it
		Durable: "agent-h2", FilterSubject: commands.Subject("h2"), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"d", "e"} {
		if err := bus.Send(ctx, "h2", "test", start(name)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := old.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if got := take(t, ctx, bus, "h2"); fmt.Sprint(got) != "[e]" {
		t.Fatalf("the file-stored consumer's replacement delivered %v, want [e] (d was acknowledged)", got)
	}
	now, err := stream.Consumer(ctx, "agent-h2")
	if err != nil {
		t.Fatal(err)
	}
	if !now.CachedInfo().Config.MemoryStorage {
		t.Fatal("the earlier version's consumer still keeps its state in files")
	}
}

// A consumer asked to deliver from past the stream's last command (an
// agent's position on a stream since made anew, whose sequences started
// again) delivers the commands of the last Lookback instead of waiting for
// the stream to reach it; and an existing consumer's settings are brought
// up to date.
func TestConsumerFromPastTheStreamAndSettingsUpdated(t *testing.T) {
	ctx := t.Context()
	_, js := natstest.Connect(t, natstest.Start(t))
	bus, err := setUp(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if err := bus.Send(ctx, "h1", "test", start(name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bus.Consumer(ctx, "h1", 5000); err != nil {
		t.Fatal(err)
	}
	if got := take(t, ctx, bus, "h1"); fmt.Sprint(got) != "[a b]" {
		t.Fatalf("a consumer made from past the stream's end delivered %v, want [a b]", got)
	}

	stream, err := js.Stream(ctx, commands.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "agent-h2", FilterSubject: commands.Subject("h2"), AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 5 * time.Second, MemoryStorage: true,
	}); err != nil {
		t.Fatal(err)
	}
	c, err := bus.Consumer(ctx, "h2", 0)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := c.CachedInfo().Config; cfg.AckWait != 30*time.Second || cfg.MaxDeliver != 10 {
		t.Fatalf("the existing consumer has AckWait %s and MaxDeliver %d, want them brought to 30s and 10", cfg.AckWait, cfg.MaxDeliver)
	}
}

// More hosts than nats-server's default consumer limit (1,000) each get
// their consumer.
func TestMoreHostsThanTheServersDefaultConsumerLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("1,100 consumers take about 15 s")
	}
	ctx := t.Context()
	_, js := natstest.Connect(t, natstest.Start(t))
	bus, err := setUp(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1100 {
		if _, err := bus.Consumer(ctx, fmt.Sprintf("x%d", i), 0); err != nil {
			t.Fatalf("consumer %d: %v", i+1, err)
		}
	}
}

// A commands stream an earlier version made as a work queue is replaced.
func TestReplacesAnOldWorkQueueStream(t *testing.T) {
	ctx := t.Context()
	_, js := natstest.Connect(t, natstest.Start(t))
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: commands.StreamName, Subjects: []string{"tether.cmd.host.*"}, Retention: jetstream.WorkQueuePolicy,
	}); err != nil {
		t.Fatal(err)
	}
	bus, err := setUp(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, commands.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if r := s.CachedInfo().Config.Retention; r != jetstream.LimitsPolicy {
		t.Fatalf("retention %s, want limits", r)
	}
	if err := bus.Send(ctx, "h1", "test", start("a")); err != nil {
		t.Fatal(err)
	}
	if got := take(t, ctx, bus, "h1"); fmt.Sprint(got) != "[a]" {
		t.Fatalf("h1 got %v", got)
	}
	// Setting it up again leaves it be.
	if _, err := setUp(ctx, js); err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("the stream holds %d commands after a second New, want the 1 sent", info.State.Msgs)
	}
}

// BenchmarkCommandAck measures one command's send, delivery and
// acknowledgement with TETHER_BENCH_HOSTS (default 2,000) host consumers on
// the stream, under the retention in use and under a work queue (the
// earlier design), whose acknowledgements scan every consumer.
func BenchmarkCommandAck(b *testing.B) {
	hosts := 2000
	if v := os.Getenv("TETHER_BENCH_HOSTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("TETHER_BENCH_HOSTS=%q: a positive number", v)
		}
		hosts = n
	}
	for _, retention := range []jetstream.RetentionPolicy{jetstream.LimitsPolicy, jetstream.WorkQueuePolicy} {
		b.Run(retention.String(), func(b *testing.B) {
			ctx := context.Background()
			_, js := natstest.Connect(b, natstest.Start(b))
			stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
				Name: commands.StreamName, Subjects: []string{"tether.cmd.host.*"}, Retention: retention, Storage: jetstream.FileStorage,
				MaxConsumers: commands.MaxHosts,
			})
			if err != nil {
				b.Fatal(err)
			}
			for i := range hosts {
				if _, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
					Durable: fmt.Sprintf("agent-h%d", i), FilterSubject: commands.Subject(fmt.Sprintf("h%d", i)), AckPolicy: jetstream.AckExplicitPolicy,
				}); err != nil {
					b.Fatal(err)
				}
			}
			cons, err := stream.Consumer(ctx, "agent-h0")
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := js.Publish(ctx, commands.Subject("h0"), []byte("x")); err != nil {
					b.Fatal(err)
				}
				m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
				if err != nil {
					b.Fatal(err)
				}
				if err := m.DoubleAck(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// setUp creates the stream, as `tether migrate` does, and opens it.
func setUp(ctx context.Context, js jetstream.JetStream) (*commands.Bus, error) {
	if err := commands.Setup(ctx, js, 1); err != nil {
		return nil, err
	}
	return commands.New(ctx, js)
}

// TestNewWithoutSetup: a service never creates the stream; it says to run
// `tether migrate`.
func TestNewWithoutSetup(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	if _, err := commands.New(t.Context(), js); !errors.Is(err, jsclient.ErrNotSetUp) {
		t.Fatalf("New without the stream: %v, want ErrNotSetUp", err)
	}
}
