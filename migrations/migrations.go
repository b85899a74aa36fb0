// Package migrations holds Tether's PostgreSQL schema as goose migrations
// (NNNNN_name.sql files with -- +goose Up / -- +goose Down sections),
// embedded in the binary. `tether migrate` (and `tether dev`) applies them
// (Apply); the services only check that none is pending (Check).
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// lockTimeout bounds the wait for another process's migrations; the lock is
// polled every lockPoll.
const (
	lockPoll    = time.Second
	lockTimeout = 5 * time.Minute
)

// FS returns the migration files.
func FS() fs.FS { return files }

// ErrPending is the error of a database that lacks some of this binary's
// migrations.
var ErrPending = errors.New("the database schema is behind this version of Tether: run `tether migrate` (with the same DATABASE_URL) first")

// Check returns an error wrapping ErrPending if the database at databaseURL
// lacks some of the embedded migrations. A database ahead of this binary
// (a newer version migrated it during a rolling upgrade) passes: migrations
// only add.
func Check(ctx context.Context, databaseURL string) error {
	return withProvider(databaseURL, nil, func(p *goose.Provider) error {
		have, want, err := p.GetVersions(ctx)
		if err != nil {
			return fmt.Errorf("migrations: read the schema version: %w", err)
		}
		if have < want {
			return fmt.Errorf("schema version %d, this binary needs %d: %w", have, want, ErrPending)
		}
		return nil
	})
}

// withProvider opens the database at databaseURL, runs fn with a goose
// provider of the embedded files over it (with opts), and closes it.
func withProvider(databaseURL string, opts []goose.ProviderOption, fn func(*goose.Provider) error) (err error) {
	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		return fmt.Errorf("migrations: open database: %w", err)
	}
	defer func() {
		if cerr := db.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("migrations: close database: %w", cerr))
		}
	}()
	// Only the embedded files: no Go migrations registered globally by
	// whatever else is linked in.
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, append(opts, goose.WithDisableGlobalRegistry(true))...)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return fn(p)
}

// Apply brings the database at databaseURL up to the newest migration,
// logging each one it applies to logger (nil discards). It holds a
// PostgreSQL advisory lock while migrating, so processes starting at once
// are safe: one migrates, the others wait for it and find nothing left to
// do.
func Apply(ctx context.Context, databaseURL string, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// goose polls for the lock every period; its default of 5 s would keep
	// every process but the first waiting that long.
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockTimeout(uint64(lockPoll/time.Second), uint64(lockTimeout/lockPoll)))
	if err != nil {
		return fmt.Errorf("migrations: lock: %w", err)
	}
	return withProvider(databaseURL, []goose.ProviderOption{goose.WithSessionLocker(locker)}, func(p *goose.Provider) error {
		results, err := p.Up(ctx)
		if partial, ok := errors.AsType[*goose.PartialError](err); ok {
			results = partial.Applied
		}
		for _, r := range results {
			logger.InfoContext(ctx, "migration applied",
				"version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
		}
		if err != nil {
			return fmt.Errorf("migrations: apply: %w", err)
		}
		version, err := p.GetDBVersion(ctx)
		if err != nil {
			return fmt.Errorf("migrations: read version: %w", err)
		}
		logger.InfoContext(ctx, "database schema up to date", "version", version, "applied", len(results))
		return nil
	})
}
