package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tetherhq/tether/events"
	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	"github.com/tetherhq/tether/services/nats/hostlogs"
)

// Game server logs (docs/operations.md, "Game server logs"). The agent
// reads each game server's stdout and stderr through pipes and writes
// them, line by line, to log files of its own under
// <LogDir>/logs/<fleet>/<game server id>/: the game server never opens a
// file, so it needs no access to the directory, and the files (0600 in
// directories 0700) are the agent's user's alone, out of other game
// servers' reach when they run as another user (--run-as). A file is
// closed at LogOptions.FileMaxBytes and the next one started; retention
// removes files older than LogOptions.Retention, and the oldest first
// while all of them together exceed LogOptions.MaxBytes. The API reads
// them through the host's logs subject (services/nats/hostlogs), while
// the server runs and after it has ended.
//
// A line in a file is "<time> <stream> <F|P> <text>": the time the agent
// read it (UTC, RFC 3339 with nanoseconds, fixed width), stdout or stderr,
// F for a whole line or P for a part that goes on in the stream's next
// line (a line over logLineMax, or output that ended without a newline),
// and the text as the process wrote it, without its newline. It is the
// format of Kubernetes' container logs (CRI), readable with less or grep.

// LogOptions configure the game servers' log files.
type LogOptions struct {
	// Retention is how long a log file is kept after its last write;
	// default DefaultLogRetention.
	Retention time.Duration
	// MaxBytes bounds the log files of all the host's game servers
	// together: above it, the oldest files are removed first; default
	// DefaultLogMaxBytes. The file a running server writes is never
	// removed.
	MaxBytes int64
	// FileMaxBytes is the size at which a server's log file is closed and
	// its next one started; default DefaultLogFileMaxBytes.
	FileMaxBytes int64
	// RetentionEvery is how often retention runs; default
	// DefaultLogRetentionEvery. A run removes at most logRemovalsPerRun
	// files, and the next comes at once when there were more.
	RetentionEvery time.Duration
}

// The defaults of LogOptions, and of the `tether agent` flags.
const (
	// DefaultLogRetention is 14 days: as long as GameLift keeps session logs.
	DefaultLogRetention      = 14 * 24 * time.Hour
	DefaultLogMaxBytes       = 1 << 30
	DefaultLogFileMaxBytes   = 10 << 20
	DefaultLogRetentionEvery = time.Minute
)

// minLogFileMaxBytes is the smallest FileMaxBytes: some lines a file.
const minLogFileMaxBytes = 1 << 10

func (o *LogOptions) setDefaults() {
	if o.Retention <= 0 {
		o.Retention = DefaultLogRetention
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultLogMaxBytes
	}
	if o.FileMaxBytes <= 0 {
		o.FileMaxBytes = DefaultLogFileMaxBytes
	}
	o.FileMaxBytes = max(o.FileMaxBytes, minLogFileMaxBytes)
	if o.RetentionEvery <= 0 {
		o.RetentionEvery = DefaultLogRetentionEvery
	}
}

// logsDir is the directory of the game servers' logs under the agent's
// LogDir.
const logsDir = "logs"

// logReadsInFlight bounds the log reads an agent serves at once.
const logReadsInFlight = 64

// logStore keeps the game servers' log files of one host: it writes them
// (serverLog), reads them for the API (logread.go) and applies retention
// (logretention.go).
type logStore struct {
	root string // <LogDir>/logs
	opts LogOptions
	log  *slog.Logger
	now  func() time.Time

	// dirMu orders the creation of a server's directory and its first
	// file against retention's removal of empty directories.
	dirMu sync.Mutex

	mu     sync.Mutex
	active map[string]*serverLog // servers whose output may still come, by name

	// waiting, if set, is called when a read starts to wait for more
	// (tests).
	waiting func()
}

func newLogStore(logDir string, opts LogOptions, log *slog.Logger) (*logStore, error) {
	root := filepath.Join(logDir, logsDir)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("agent: game server logs: %w", err)
	}
	// A directory made by a version that made it open to all is closed.
	if err := os.Chmod(root, 0o700); err != nil {
		return nil, fmt.Errorf("agent: game server logs: %w", err)
	}
	return &logStore{root: root, opts: opts, log: log, now: time.Now, active: map[string]*serverLog{}}, nil
}

// dirOf returns the directory of a game server's log files.
func (s *logStore) dirOf(name string) (string, error) {
	fleet, id, err := events.ParseGameServerName(name)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.root, fleet, id), nil
}

// server returns the log of a server the agent supervises, made on the
// first call; the agent calls release when it supervises it no more.
func (s *logStore) server(name string) (*serverLog, error) {
	dir, err := s.dirOf(name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.active[name]; l != nil {
		l.mu.Lock()
		l.supervised = true
		l.mu.Unlock()
		return l, nil
	}
	l := &serverLog{store: s, name: name, dir: dir, supervised: true, changed: make(chan struct{})}
	s.active[name] = l
	return l, nil
}

// lookup returns the log of a server whose output may still come, nil
// for any other.
func (s *logStore) lookup(name string) *serverLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active[name]
}

// release says the agent supervises the server no more: once its pipes
// are drained, its log has ended.
func (s *logStore) release(name string) {
	if l := s.lookup(name); l != nil {
		l.release()
	}
}

// forget drops an ended log from the active ones.
func (s *logStore) forget(l *serverLog) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active[l.name] == l {
		delete(s.active, l.name)
	}
}

// openFiles returns the files that servers' logs write now, which
// retention leaves alone, and their directories.
func (s *logStore) openFiles() (files, dirs map[string]bool) {
	s.mu.Lock()
	list := make([]*serverLog, 0, len(s.active))
	for _, l := range s.active {
		list = append(list, l)
	}
	s.mu.Unlock()
	files, dirs = map[string]bool{}, map[string]bool{}
	for _, l := range list {
		dirs[l.dir] = true
		l.mu.Lock()
		if l.f != nil {
			files[l.f.Name()] = true
		}
		l.mu.Unlock()
	}
	return files, dirs
}

// serveLogs answers the API's log reads for this host until ctx ends.
func (a *Agent) serveLogs(ctx context.Context) error {
	nc := a.opts.JetStream.Conn()
	err := hostlogs.Serve(ctx, nc, a.opts.HostID, logReadsInFlight, func(ctx context.Context, req *agentv1.LogsRequest) *agentv1.LogsReply {
		return a.logs.read(ctx, req, int(nc.MaxPayload()))
	}, a.log)
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

// output makes the pipes of one start of a server's process, whose output
// goes to the server's log files.
func (s *logStore) output(name string) (*processOutput, error) {
	l, err := s.server(name)
	if err != nil {
		return nil, err
	}
	return l.output()
}
