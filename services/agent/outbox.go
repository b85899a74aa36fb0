package agent

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// ErrOutboxFull is returned when events cannot be kept for later publishing
// because the outbox holds its maximum.
var ErrOutboxFull = errors.New("agent: outbox full: events cannot be recorded until NATS is reachable again")

// outboxEntry is one event waiting to be published.
type outboxEntry struct {
	subject string
	data    []byte // a marshalled events.Envelope
}

// outbox keeps events on disk while NATS is unreachable, so they are
// published later, in order, with their ids (docs/architecture.md, "The
// write path"). The log file holds length-prefixed entries; the cursor file
// counts the entries already published. Both are reset when the outbox
// empties.
type outbox struct {
	dir string
	max int

	mu      sync.Mutex
	log     *os.File
	entries []outboxEntry // not yet published, oldest first
	done    int           // entries of the log already published
	ready   chan struct{} // closed and replaced when an entry arrives
}

func openOutbox(dir string, max int) (*outbox, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("agent: outbox dir: %w", err)
	}
	o := &outbox{dir: dir, max: max, ready: make(chan struct{})}
	if b, err := os.ReadFile(o.cursorPath()); err == nil {
		if o.done, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return nil, fmt.Errorf("agent: outbox cursor: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("agent: outbox cursor: %w", err)
	}
	all, err := readOutboxLog(o.logPath())
	if err != nil {
		return nil, err
	}
	if o.done > len(all) {
		if len(all) > 0 {
			return nil, fmt.Errorf("agent: outbox cursor %d is past its %d entries", o.done, len(all))
		}
		o.done = 0 // emptied, then stopped before the cursor was reset
	}
	o.entries = all[o.done:]
	if o.log, err = os.OpenFile(o.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, fmt.Errorf("agent: outbox log: %w", err)
	}
	return o, nil
}

func (o *outbox) logPath() string    { return filepath.Join(o.dir, "outbox.log") }
func (o *outbox) cursorPath() string { return filepath.Join(o.dir, "outbox.cursor") }

func readOutboxLog(path string) ([]outboxEntry, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agent: outbox log: %w", err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var out []outboxEntry
	for {
		subject, err := readChunk(r)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("agent: outbox log entry %d: %w", len(out), err)
		}
		data, err := readChunk(r)
		if err != nil {
			// A torn last write (crash mid-append): that entry was never acknowledged to its writer.
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("agent: outbox log entry %d: %w", len(out), err)
		}
		out = append(out, outboxEntry{subject: string(subject), data: data})
	}
}

func readChunk(r io.Reader) ([]byte, error) {
	var n uint32
	if err := binary.Read(r, binary.BigEndian, &n); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// len returns the number of unpublished entries.
func (o *outbox) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.entries)
}

// push appends entries durably (fsync) before returning.
func (o *outbox) push(entries ...outboxEntry) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.entries)+len(entries) > o.max {
		return ErrOutboxFull
	}
	var buf []byte
	for _, e := range entries {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(e.subject)))
		buf = append(buf, e.subject...)
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(e.data)))
		buf = append(buf, e.data...)
	}
	if _, err := o.log.Write(buf); err != nil {
		return fmt.Errorf("agent: outbox write: %w", err)
	}
	if err := o.log.Sync(); err != nil {
		return fmt.Errorf("agent: outbox sync: %w", err)
	}
	o.entries = append(o.entries, entries...)
	close(o.ready)
	o.ready = make(chan struct{})
	return nil
}

// head returns the oldest entry, or a channel that is closed when one arrives.
func (o *outbox) head() (outboxEntry, bool, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.entries) == 0 {
		return outboxEntry{}, false, o.ready
	}
	return o.entries[0], true, nil
}

// pop marks the oldest entry published; an empty outbox is reset on disk.
func (o *outbox) pop() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.entries = o.entries[1:]
	o.done++
	if len(o.entries) == 0 {
		if err := o.log.Truncate(0); err != nil {
			return fmt.Errorf("agent: outbox reset: %w", err)
		}
		o.done = 0
	}
	tmp := o.cursorPath() + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(o.done)), 0o644); err != nil {
		return fmt.Errorf("agent: outbox cursor: %w", err)
	}
	if err := os.Rename(tmp, o.cursorPath()); err != nil {
		return fmt.Errorf("agent: outbox cursor: %w", err)
	}
	return nil
}

func (o *outbox) close() error { return o.log.Close() }
