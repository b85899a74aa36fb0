// Package stack starts Tether's control plane inside a test: embedded NATS
// JetStream with the event store, and, as the options ask, an ephemeral
// PostgreSQL database with its views, the projector, the agents' command
// stream and API replicas. It is the one fixture the component tests share;
// each test package adds the helpers of its own domain on top.
//
// A test binary that asks for PostgreSQL runs pgtest.Main from its TestMain.
package stack

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tetherhq/tether/projections/postgres"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/compose"
	"github.com/tetherhq/tether/services/nats/commands"
	"github.com/tetherhq/tether/services/platform/playertoken"
	"github.com/tetherhq/tether/services/projector"
	"github.com/tetherhq/tether/services/testkit/natsstack"
	"github.com/tetherhq/tether/services/testkit/pgtest"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// Stack is what New started. Fields a test did not ask for are nil.
type Stack struct {
	// T is the test the stack belongs to; it ends with the test.
	T testing.TB
	// Ctx is cancelled when the test ends, before the stack is torn down.
	Ctx context.Context
	// Base is the embedded NATS (natsstack): NATS, the server (the first
	// node with WithNATSCluster); NATSNodes, the cluster's nodes
	// (WithNATSCluster, nil otherwise); Conn and JS, a client of it (of
	// every node with WithNATSCluster, reconnecting to another when one
	// stops); Store, the event store on JS.
	*natsstack.Base
	// Logger writes warnings and errors to stderr, tagged with the test.
	Logger *slog.Logger

	// DBURL, Pool and Views: the test's own database, a pool on it, and
	// the views read from it (WithPostgres, WithProjector or WithAPI).
	DBURL string
	Pool  *pgxpool.Pool
	Views *postgres.Views

	// Commands is the agents' command stream (WithCommands or WithAPI).
	Commands *commands.Bus
	// Tokens are the player-token keys the API replicas sign with (WithAPI).
	Tokens *playertoken.Ring
	// APIs are the running API replicas (WithAPI), in start order.
	APIs []*apiserver.Server

	cfg       config
	wg        sync.WaitGroup
	projector func() // stops the running projector; nil while none runs
}

type config struct {
	postgres    bool
	projector   bool
	projectorFn []func(*postgres.ProjectorOptions)
	commands    bool
	replicas    int
	apiFn       []func(*Stack, *apiserver.Options)
	leaseTTL    time.Duration
	natsNodes   int
}

// Option asks New for a part of the stack.
type Option func(*config)

// WithPostgres gives the stack a fresh database, migrated, with a pool
// (as many connections as a `tether` service opens) and its views.
func WithPostgres() Option { return func(c *config) { c.postgres = true } }

// WithProjector runs the projector from the start (it implies
// WithPostgres); configure changes its options. Without it a test may
// start one later with StartProjector.
func WithProjector(configure ...func(*postgres.ProjectorOptions)) Option {
	return func(c *config) {
		c.postgres, c.projector = true, true
		c.projectorFn = append(c.projectorFn, configure...)
	}
}

// WithCommands creates the agents' command stream.
func WithCommands() Option { return func(c *config) { c.commands = true } }

// WithAPI runs replicas API servers over the same NATS and PostgreSQL (it
// implies WithPostgres and WithCommands), each on loopback ports of its
// own, and waits until they answer /healthz. configure changes each
// replica's options, with the stack at hand.
func WithAPI(replicas int, configure ...func(*Stack, *apiserver.Options)) Option {
	return func(c *config) {
		c.postgres, c.commands, c.replicas = true, true, max(replicas, 1)
		c.apiFn = append(c.apiFn, configure...)
	}
}

// WithNATSCluster runs NATS as a cluster of n embedded nodes (3 or 5)
// instead of one server, with every stream and bucket replicated on n.
func WithNATSCluster(n int) Option { return func(c *config) { c.natsNodes = n } }

// WithLeaseTTL sets the lease bucket's TTL (default 1 s, so a test's
// standby controller takes over from a silent one quickly).
func WithLeaseTTL(ttl time.Duration) Option { return func(c *config) { c.leaseTTL = ttl } }

// New starts the stack that opts ask for; without options, NATS with every
// stream and bucket (as `tether migrate` sets them up) and the event store. Everything stops when the test ends, and a component that
// stopped with an error fails the test.
func New(t testing.TB, opts ...Option) *Stack {
	t.Helper()
	s := &Stack{T: t}
	for _, o := range opts {
		o(&s.cfg)
	}
	s.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("test", t.Name())
	s.Base = natsstack.Start(t, natsstack.Options{Nodes: s.cfg.natsNodes, LeaseTTL: s.cfg.leaseTTL})
	ctx, cancel := context.WithCancel(context.Background())
	s.Ctx = ctx
	var err error
	if s.cfg.postgres {
		s.DBURL = pgtest.NewDatabase(t)
		if s.Pool, err = pgxpool.New(ctx, s.DBURL+"&pool_max_conns=20"); err != nil {
			cancel()
			t.Fatal(err)
		}
		s.Views = postgres.NewViews(s.Pool)
	}
	t.Cleanup(func() {
		cancel()
		s.wg.Wait()
		if s.Pool != nil {
			s.Pool.Close()
		}
	})
	if s.cfg.commands {
		if s.Commands, err = commands.New(ctx, s.JS); err != nil {
			t.Fatal(err)
		}
	}
	if s.cfg.projector {
		s.StartProjector(s.cfg.projectorFn...)
	}
	if s.cfg.replicas > 0 {
		s.startAPIs()
	}
	return s
}

// Go runs a component until the test ends; an error it returns, other
// than at the end, fails the test.
func (s *Stack) Go(name string, run func(context.Context) error) {
	s.goUntil(s.Ctx, name, run)
}

// goUntil runs a component until ctx ends or the test does, whichever is
// first, and returns a channel that is closed once it has returned.
func (s *Stack) goUntil(ctx context.Context, name string, run func(context.Context) error) <-chan struct{} {
	done := make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		if err := run(ctx); err != nil {
			s.T.Errorf("%s stopped with an error: %v", name, err)
		}
	}()
	return done
}

// StartProjector runs a projector on the stack's views; it resumes from
// their checkpoint. configure changes its options.
func (s *Stack) StartProjector(configure ...func(*postgres.ProjectorOptions)) {
	s.T.Helper()
	if s.Pool == nil {
		s.T.Fatal("stack: a projector needs PostgreSQL (WithPostgres)")
	}
	if s.projector != nil {
		s.T.Fatal("stack: a projector runs already")
	}
	o := postgres.ProjectorOptions{Pool: s.Pool, JetStream: s.JS, Logger: s.Logger}
	for _, f := range configure {
		f(&o)
	}
	p, err := compose.Projector(s.Ctx, compose.Env{Logger: s.Logger}, compose.ProjectorOptions{Service: projector.Options{Projector: o}, Alone: true})
	if err != nil {
		s.T.Fatal(err)
	}
	ctx, cancel := context.WithCancel(s.Ctx)
	done := s.goUntil(ctx, "projector", p.Run)
	s.projector = func() {
		cancel()
		<-done
		s.projector = nil
	}
}

// StopProjector stops the running projector and waits until it has.
func (s *Stack) StopProjector() {
	s.T.Helper()
	if s.projector == nil {
		s.T.Fatal("stack: no projector runs")
	}
	s.projector()
}

// BehindFleet is the one fleet whose events the replica of BehindReplica
// holds.
const BehindFleet = natsstack.BehindFleet

// BehindReplica gives the events stream a replica behind it
// (natsstack.Base.BehindReplica): it holds the events of BehindFleet alone.
func (s *Stack) BehindReplica() { s.Base.BehindReplica(s.T) }

// ProjectorRunning reports whether a projector runs.
func (s *Stack) ProjectorRunning() bool { return s.projector != nil }

// startAPIs starts the API replicas and waits until the last answers.
func (s *Stack) startAPIs() {
	t := s.T
	t.Helper()
	var err error
	if s.Tokens, err = playertoken.Parse(playertoken.NewKeySpec("test")); err != nil {
		t.Fatal(err)
	}
	tlsServed := false
	for range s.cfg.replicas {
		o := apiserver.Options{
			GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
			Store: s.Store, Views: s.Views, Freshness: postgres.NewFreshness(s.Pool, s.Logger),
			Tokens: s.Tokens, Commands: s.Commands, Logger: s.Logger,
		}
		for _, f := range s.cfg.apiFn {
			f(s, &o)
		}
		tlsServed = o.TLS != nil
		// The stack's API gets what the test gives it and no more (no
		// JetStream connection: replicas do not split the candidates).
		api, err := compose.API(s.Ctx, compose.Env{Logger: s.Logger}, compose.APIOptions{Server: o})
		if err != nil {
			t.Fatal(err)
		}
		s.APIs = append(s.APIs, api)
		s.Go(fmt.Sprintf("API replica %d", len(s.APIs)), api.Run)
	}
	last := "http://" + s.APIs[len(s.APIs)-1].HTTPAddr() + "/healthz"
	client := http.DefaultClient
	if tlsServed {
		// Only whether it answers: the test checks the certificate itself.
		last = "https" + strings.TrimPrefix(last, "http")
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	}
	wait.Until(t, 10*time.Second, "the API to answer "+last, func() error {
		resp, err := client.Get(last)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	// The stream is empty yet: each replica's views have caught up with it
	// as soon as it has read its position, and a read of a missing row is
	// NOT_FOUND from then on, not UNAVAILABLE.
	for i, api := range s.APIs {
		wait.For(t, 10*time.Second, fmt.Sprintf("API replica %d's views to catch up", i+1), api.ViewsCaughtUp)
	}
}
