package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/wait"
)

func TestMain(m *testing.M) {
	// No test reads the config file of whoever runs it: those that need
	// one set $TETHER_CONFIG to their own.
	_ = os.Setenv(configEnv, filepath.Join(os.TempDir(), fmt.Sprintf("tetherctl-test-%d-no-config", os.Getpid()), "config.yaml"))
	pgtest.Main(m)
}

// stack is a real API server over embedded NATS JetStream and an ephemeral
// PostgreSQL, with the projector running: what tetherctl talks to (the
// shared testkit stack, with the projection service on).
type stack struct {
	t     *testing.T
	ctx   context.Context
	addr  string
	store *natsjs.Store
	js    jetstream.JetStream
}

func newStack(t *testing.T) *stack {
	t.Helper()
	k := kit.New(t, kit.WithProjector(), kit.WithAPI(1, func(k *kit.Stack, o *apiserver.Options) {
		o.ProjectionPool, o.JetStream = k.Pool, k.JS
	}))
	return &stack{t: t, ctx: k.Ctx, addr: k.APIs[0].GRPCAddr(), store: k.Store, js: k.JS}
}

// result is one tetherctl run.
type result struct {
	code           int
	stdout, stderr string
}

// run executes tetherctl in-process against the stack.
func (s *stack) run(args ...string) result {
	s.t.Helper()
	return runCLI(context.Background(), s.addr, nil, args...)
}

// runCLI executes tetherctl in-process with stdin (may be nil).
func runCLI(ctx context.Context, addr string, stdin io.Reader, args ...string) result {
	var out, errOut bytes.Buffer
	root := newRoot(&out)
	if stdin != nil {
		root.SetIn(stdin)
	}
	code := execute(ctx, root, append([]string{"--addr", addr}, args...), &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// ok runs tetherctl and fails the test unless it succeeds.
func (s *stack) ok(args ...string) string {
	s.t.Helper()
	r := s.run(args...)
	if r.code != 0 {
		s.t.Fatalf("tetherctl %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// appendEvents writes events to an aggregate as an agent or controller
// would, without a concurrency check, and returns the last one's sequence
// as a string for --min-sequence.
func (s *stack) appendEvents(name string, payloads ...proto.Message) string {
	s.t.Helper()
	var seq uint64
	for _, p := range payloads {
		var err error
		if seq, err = s.store.Append(s.ctx, events.MustSubject(name), events.AnySequence, events.New(name, time.Now(), p)); err != nil {
			s.t.Fatalf("append %T to %s: %v", p, name, err)
		}
	}
	return strconv.FormatUint(seq, 10)
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestSeveralReplicas: --addr takes the replicas comma-separated, and a
// replica that is gone does not fail a command: tetherctl creates and lists
// a fleet through the one that is up.
func TestSeveralReplicas(t *testing.T) {
	s := newStack(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	s.addr = gone + "," + s.addr
	s.ok("fleets", "create", "-f", writeFile(t, "arena.yaml", arenaYAML))
	wait.For(t, 10*time.Second, "fleets list through two replicas, one gone, to show the fleet", func() bool {
		return strings.Contains(s.ok("fleets", "list"), "arena")
	})
}
