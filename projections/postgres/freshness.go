package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Freshness tracks the views' checkpoint so reads can wait for their own
// writes. One LISTEN connection per process serves every waiter; a slow poll
// covers notifications lost while that connection was down. The checkpoint
// only grows, except when the database is restored from an older copy or
// recreated: a reading below what was seen then lowers it, so that waiters
// wait for the views to reach their sequence again.
type Freshness struct {
	pool  *pgxpool.Pool
	views *Views
	log   *slog.Logger
	poll  time.Duration

	mu       sync.Mutex
	seen     uint64
	advanced chan struct{} // closed and replaced whenever seen grows
}

// NewFreshness returns a tracker over the views in pool; Run keeps it current.
func NewFreshness(pool *pgxpool.Pool, logger *slog.Logger) *Freshness {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Freshness{pool: pool, views: NewViews(pool), log: logger, poll: 250 * time.Millisecond, advanced: make(chan struct{})}
}

// Seen returns the highest checkpoint observed.
func (f *Freshness) Seen() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen
}

// read records the checkpoint as read from the views: below what was seen,
// the views went back (a restore), and the waiters must wait for them again.
func (f *Freshness) read(cp uint64) {
	f.mu.Lock()
	seen := f.seen
	if cp < seen {
		f.seen = cp
	}
	f.mu.Unlock()
	if cp < seen {
		f.log.Warn("the views' checkpoint went back (database restored or recreated); reads wait for them to catch up again",
			"checkpoint", cp, "seen", seen)
		return
	}
	f.observe(cp)
}

func (f *Freshness) observe(cp uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cp > f.seen {
		f.seen = cp
		close(f.advanced)
		f.advanced = make(chan struct{})
	}
}

// WaitFor returns once the views have applied seq, or ctx's error.
func (f *Freshness) WaitFor(ctx context.Context, seq uint64) error {
	for {
		f.mu.Lock()
		seen, advanced := f.seen, f.advanced
		f.mu.Unlock()
		if seen >= seq {
			return nil
		}
		select {
		case <-advanced:
		case <-ctx.Done():
			return fmt.Errorf("views at sequence %d, waiting for %d: %w", seen, seq, ctx.Err())
		}
	}
}

// Run listens for checkpoint notifications until ctx ends, reconnecting
// after failures.
func (f *Freshness) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := f.listen(ctx); err != nil && ctx.Err() == nil {
			f.log.Warn("checkpoint listener failed; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

func (f *Freshness) listen(ctx context.Context) error {
	conn, err := f.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+CheckpointChannel); err != nil {
		conn.Conn().Close(ctx) //nolint:errcheck // discarding a broken connection
		return fmt.Errorf("listen: %w", err)
	}
	defer func() {
		// Leave the pooled connection clean; if that fails, drop it.
		if _, err := conn.Exec(context.WithoutCancel(ctx), "UNLISTEN *"); err != nil {
			conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck // discarding a broken connection
		}
	}()
	for {
		// Read the checkpoint after LISTEN so no advance falls in between.
		cp, err := f.views.Checkpoint(ctx)
		if err != nil {
			return err
		}
		f.read(cp)
		wctx, cancel := context.WithTimeout(ctx, f.poll)
		n, err := conn.Conn().WaitForNotification(wctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			if v, perr := strconv.ParseUint(n.Payload, 10, 64); perr == nil {
				f.observe(v)
			}
			continue
		}
		if wctx.Err() == nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
	}
}
