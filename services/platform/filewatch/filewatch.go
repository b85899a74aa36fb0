// Package filewatch keeps a value parsed from a file current: it re-reads
// the file when its content changes, and a file that cannot be read or
// parsed leaves the last good value in force. API keys and NATS signers
// are rotated this way, without a restart.
package filewatch

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// DefaultInterval is how often Watch looks at the file.
const DefaultInterval = 2 * time.Second

// File is a value of type T parsed from a file. It is safe for concurrent
// use.
type File[T any] struct {
	path  string
	what  string // for logs: "API keys", "NATS signers"
	parse func([]byte) (T, error)
	log   *slog.Logger

	mu       sync.RWMutex
	onChange func(T)
	value    T
	loaded   []byte // the file's content as last parsed
}

// Load reads and parses the file at path; what names it in logs and
// errors. A nil log discards.
func Load[T any](path, what string, parse func([]byte) (T, error), log *slog.Logger) (*File[T], error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	v, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", what, path, err)
	}
	return &File[T]{path: path, what: what, parse: parse, log: log, value: v, loaded: data}, nil
}

// Path is the file's path.
func (f *File[T]) Path() string { return f.path }

// Value is the value last parsed.
func (f *File[T]) Value() T {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.value
}

// OnChange sets a function that Watch calls with each new value, after
// it is in force.
func (f *File[T]) OnChange(fn func(T)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onChange = fn
}

// Reload re-reads the file if its content changed. A file that cannot be
// read or parsed leaves the loaded value in force: the error says why.
func (f *File[T]) Reload() (changed bool, err error) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return false, fmt.Errorf("%s: %w", f.what, err)
	}
	f.mu.RLock()
	same := bytes.Equal(data, f.loaded)
	f.mu.RUnlock()
	if same {
		return false, nil
	}
	v, err := f.parse(data)
	if err != nil {
		return false, fmt.Errorf("%s: %s: %w", f.what, f.path, err)
	}
	f.mu.Lock()
	f.value, f.loaded = v, data
	f.mu.Unlock()
	return true, nil
}

// Watch reloads the file every interval until ctx ends, logging each
// change and, once per distinct error, each file it refused.
func (f *File[T]) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := f.Reload()
		switch {
		case err != nil && err.Error() != lastErr:
			f.log.Error(f.what+" file refused; what was loaded before stays in force", "file", f.path, "err", err)
			lastErr = err.Error()
		case err == nil && changed:
			f.log.Info(f.what+" reloaded", "file", f.path)
			lastErr = ""
			f.mu.RLock()
			fn, v := f.onChange, f.value
			f.mu.RUnlock()
			if fn != nil {
				fn(v)
			}
		case err == nil:
			lastErr = ""
		}
	}
}
