package agent

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// logLineMax is the most of a line one log line holds: a longer one goes
// on in the stream's next log line (partial), as in Kubernetes' container
// logs.
const logLineMax = 16 << 10

// logTimeLayout is the time of a log line: UTC, always as wide.
const logTimeLayout = "2006-01-02T15:04:05.000000000Z"

// The streams' names in log lines.
const (
	stdoutName = "stdout"
	stderrName = "stderr"
)

// logFileName returns the name of a server's log file of number n.
func logFileName(n uint64) string { return fmt.Sprintf("%010d.log", n) }

// parseLogFileName returns the number of a log file's name, ok=false for
// a name that is not one.
func parseLogFileName(name string) (uint64, bool) {
	stem, ok := strings.CutSuffix(name, ".log")
	if !ok || stem == "" || strings.TrimLeft(stem, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseUint(stem, 10, 64)
	return n, err == nil && n > 0
}

// serverLog writes one game server's output to its log files: each start
// of its process gets pipes (output), whose read ends the agent copies
// into the current file, line by line, from both streams.
type serverLog struct {
	store *logStore
	name  string
	dir   string

	mu         sync.Mutex
	f          *os.File // the file written now; nil before the first line and between files
	num        uint64   // the number of f, or of the last file written
	size       int64    // of f
	copiers    int      // pipes still being read
	supervised bool     // the agent supervises the server: another start may come
	ended      bool     // neither: no more output will come
	failing    bool     // the last write failed (logged once until one succeeds)
	changed    chan struct{}
}

// processOutput is the pipes of one process start: the process gets the
// write ends as its stdout and stderr, and a copy of the read ends it never
// reads (keep: ProcessSpec.KeepOpen).
type processOutput struct {
	l                                  *serverLog
	stdoutR, stdoutW, stderrR, stderrW *os.File
	keep                               []*os.File
}

// output makes the pipes of a process start; the caller calls started
// once the start is done, whether it succeeded or not.
func (l *serverLog) output() (*processOutput, error) {
	o := &processOutput{l: l}
	var err error
	if o.stdoutR, o.stdoutW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("output pipe: %w", err)
	}
	if o.stderrR, o.stderrW, err = os.Pipe(); err != nil {
		o.closeAll()
		return nil, fmt.Errorf("output pipe: %w", err)
	}
	for _, r := range []*os.File{o.stdoutR, o.stderrR} {
		k, err := dupCloexec(r)
		if err != nil {
			o.closeAll()
			return nil, fmt.Errorf("output pipe: %w", err)
		}
		o.keep = append(o.keep, k)
	}
	return o, nil
}

// closeAll closes every end the agent holds.
func (o *processOutput) closeAll() {
	for _, f := range append([]*os.File{o.stdoutR, o.stdoutW, o.stderrR, o.stderrW}, o.keep...) {
		if f != nil {
			_ = f.Close() // a pipe end: nothing to flush
		}
	}
}

// started closes the ends the process has its own copies of and, if it
// started, copies its output into the log files until it (and every
// process that inherited its output) has closed them.
func (o *processOutput) started(ok bool) {
	if !ok {
		o.closeAll()
		return
	}
	for _, f := range append([]*os.File{o.stdoutW, o.stderrW}, o.keep...) {
		_ = f.Close() // the process holds its own copies; closing ours flushes nothing
	}
	// Handing the read ends' copies to the process (os.File.Fd) put the
	// pipes' read sides in blocking mode: back to non-blocking, so that
	// the copies below wait in the runtime's poller, not in a thread each.
	setNonblock(o.stdoutR)
	setNonblock(o.stderrR)
	o.l.mu.Lock()
	o.l.copiers += 2
	o.l.mu.Unlock()
	go o.l.copy(stdoutName, o.stdoutR)
	go o.l.copy(stderrName, o.stderrR)
}

// dupCloexec returns a copy of f's descriptor, closed on exec unless
// handed to a process on purpose (exec.Cmd.ExtraFiles).
func dupCloexec(f *os.File) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd uintptr
	var errno syscall.Errno
	if err := rc.Control(func(old uintptr) {
		fd, _, errno = syscall.Syscall(syscall.SYS_FCNTL, old, syscall.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, err
	}
	if errno != 0 {
		return nil, fmt.Errorf("dup: %w", errno)
	}
	return os.NewFile(fd, f.Name()), nil
}

// setNonblock puts f's descriptor in non-blocking mode; a failure leaves
// reads blocking a thread, which works too.
func setNonblock(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = syscall.SetNonblock(int(fd), true) })
	}
}

// copy writes one stream's lines to the log until the pipe ends.
func (l *serverLog) copy(stream string, r *os.File) {
	defer l.copierDone()
	defer r.Close() // a pipe's read end: nothing to flush
	in := bufio.NewReaderSize(r, logLineMax)
	var buf []byte
	for {
		text, err := in.ReadSlice('\n')
		if len(text) > 0 {
			whole := text[len(text)-1] == '\n'
			if whole {
				text = text[:len(text)-1]
			}
			buf = l.formatLine(buf[:0], stream, !whole, text)
			l.append(buf)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return // the end of the output (io.EOF), or a pipe that failed
		}
	}
}

// formatLine appends a log line to buf: "<time> <stream> <F|P> <text>\n".
func (l *serverLog) formatLine(buf []byte, stream string, partial bool, text []byte) []byte {
	buf = l.store.now().UTC().AppendFormat(buf, logTimeLayout)
	buf = append(buf, ' ')
	buf = append(buf, stream...)
	if partial {
		buf = append(buf, " P "...)
	} else {
		buf = append(buf, " F "...)
	}
	buf = append(buf, text...)
	return append(buf, '\n')
}

// append writes a formatted line to the current file, starting the next
// file first when the line would take the current one past FileMaxBytes.
// A line that cannot be written is dropped: the process's output is
// drained whatever happens, so a full disk never stops a game server.
func (l *serverLog) append(line []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil && l.size > 0 && l.size+int64(len(line)) > l.store.opts.FileMaxBytes {
		l.closeFileLocked()
	}
	if l.f == nil {
		if err := l.openNextLocked(); err != nil {
			l.failedLocked(err)
			return
		}
	}
	n, err := l.f.Write(line)
	l.size += int64(n)
	if err != nil {
		l.failedLocked(err)
		l.closeFileLocked() // the next line starts a file of its own, not after half a line
		return
	}
	if l.failing {
		l.failing = false
		l.store.log.Info("game server log written again", "game_server", l.name, "file", l.f.Name())
	}
	l.notifyLocked()
}

// openNextLocked starts the server's next log file, after any an earlier
// agent left.
func (l *serverLog) openNextLocked() error {
	l.store.dirMu.Lock()
	defer l.store.dirMu.Unlock()
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return err
	}
	if l.num == 0 {
		files, err := listLogFiles(l.dir)
		if err != nil {
			return err
		}
		if len(files) > 0 {
			l.num = files[len(files)-1].num
		}
	}
	f, err := os.OpenFile(filepath.Join(l.dir, logFileName(l.num+1)), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	l.num++
	l.f, l.size = f, 0
	return nil
}

// closeFileLocked closes the current file.
func (l *serverLog) closeFileLocked() {
	if l.f == nil {
		return
	}
	if err := l.f.Close(); err != nil {
		l.failedLocked(err)
	}
	l.f = nil
}

// failedLocked logs a failed write, once until one succeeds again.
func (l *serverLog) failedLocked(err error) {
	if !l.failing {
		l.failing = true
		l.store.log.Warn("game server log not written; its output is dropped until it can be", "game_server", l.name, "err", err)
	}
}

// notifyLocked wakes the reads that wait for more.
func (l *serverLog) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// copierDone counts a pipe that has ended.
func (l *serverLog) copierDone() {
	l.mu.Lock()
	l.copiers--
	ended := l.endIfDoneLocked()
	l.mu.Unlock()
	if ended {
		l.store.forget(l)
	}
}

// release says the agent supervises the server no more.
func (l *serverLog) release() {
	l.mu.Lock()
	l.supervised = false
	ended := l.endIfDoneLocked()
	l.mu.Unlock()
	if ended {
		l.store.forget(l)
	}
}

// endIfDoneLocked ends the log once no more output can come, and reports
// whether it did now.
func (l *serverLog) endIfDoneLocked() bool {
	if l.ended || l.supervised || l.copiers > 0 {
		return false
	}
	l.ended = true
	l.closeFileLocked()
	l.notifyLocked()
	return true
}

// state tells whether the log has ended, and gives a channel closed at
// its next line or at its end.
func (l *serverLog) state() (ended bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended, l.changed
}

// logFile is one of a server's log files.
type logFile struct {
	num  uint64
	path string
}

// listLogFiles returns a server's log files, oldest first; a directory
// that does not exist has none.
func listLogFiles(dir string) ([]logFile, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []logFile
	for _, e := range entries {
		if n, ok := parseLogFileName(e.Name()); ok && e.Type().IsRegular() {
			out = append(out, logFile{num: n, path: filepath.Join(dir, e.Name())})
		}
	}
	// By number: names sort the same way only up to ten digits.
	slices.SortFunc(out, func(a, b logFile) int { return cmp.Compare(a.num, b.num) })
	return out, nil
}
