package main

import (
	"bytes"
	"context"
	"github.com/nats-io/nats.go/jetstream"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs"
	"github.com/tetherhq/tether/projections/postgres"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/platform/playertoken"
	"github.com/tetherhq/tether/services/testkit/natstest"
	"github.com/tetherhq/tether/services/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// stack is a real API server over embedded NATS JetStream and an ephemeral
// PostgreSQL, with the projector running: what tetherctl talks to.
type stack struct {
	t     *testing.T
	ctx   context.Context
	addr  string
	store *natsjs.Store
	js    jetstream.JetStream
}

func newStack(t *testing.T) *stack {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns)
	store, err := natsjs.New(ctx, js, natsjs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	proj, err := postgres.NewProjector(postgres.ProjectorOptions{Pool: pool, JetStream: js, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := playertoken.Parse(playertoken.NewKeySpec("test"))
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.New(apiserver.Options{
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Store: store, Views: postgres.NewViews(pool), Freshness: postgres.NewFreshness(pool, log), Logger: log,
		Tokens: tokens, ProjectionPool: pool, JetStream: js,
	})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { errs <- proj.Run(ctx) }()
	go func() { errs <- api.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("component stopped with error: %v", err)
			}
		}
		pool.Close()
	})
	return &stack{t: t, ctx: ctx, addr: api.GRPCAddr(), store: store, js: js}
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
