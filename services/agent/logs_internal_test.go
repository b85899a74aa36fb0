package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// testClock is a clock moved by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newTestLogStore returns a store in a temporary directory whose lines
// are timed by clock.
func newTestLogStore(t *testing.T, opts LogOptions, clock *testClock) *logStore {
	t.Helper()
	opts.setDefaults()
	s, err := newLogStore(t.TempDir(), opts, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.now = clock.Now
	return s
}

// writeLine writes a line as a copier would.
func writeLine(l *serverLog, stream string, partial bool, text string) {
	l.append(l.formatLine(nil, stream, partial, []byte(text)))
}

// readAll reads a server's lines from cursor (nil: where req starts) to
// the end, chunk by chunk, as the API does.
func readAll(t *testing.T, s *logStore, req *agentv1.LogsRequest) (lines []string, last *agentv1.LogsReply) {
	t.Helper()
	for range 1000 {
		reply := s.read(context.Background(), req, 1<<20)
		if reply.GetError() != agentv1.LogsReply_ERROR_UNSPECIFIED {
			t.Fatalf("read: %v: %s", reply.GetError(), reply.GetErrorMessage())
		}
		for _, l := range reply.GetLines() {
			lines = append(lines, fmt.Sprintf("%s %s", strings.ToLower(l.GetStream().String()), l.GetText()))
		}
		if reply.GetCaughtUp() {
			return lines, reply
		}
		req = &agentv1.LogsRequest{GameServer: req.GetGameServer(), Stream: req.GetStream(), SinceTime: req.GetSinceTime(),
			MaxBytes: req.GetMaxBytes(), Cursor: reply.GetNext()}
	}
	t.Fatal("the read never caught up")
	return nil, nil
}

const testServer = "fleets/arena/gameServers/gs-1"

func TestLogLinesRotateAndAreReadBack(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := &testClock{now: t0}
	s := newTestLogStore(t, LogOptions{FileMaxBytes: 1 << 10}, clock)
	l, err := s.server(testServer)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 100 {
		stream := stdoutName
		if i%2 == 1 {
			stream = stderrName
		}
		text := fmt.Sprintf("line %03d %s", i, strings.Repeat("x", 20))
		writeLine(l, stream, false, text)
		want = append(want, stream+" "+text)
		clock.add(time.Second)
	}
	files, err := listLogFiles(filepath.Join(s.root, "arena", "gs-1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("%d files for 100 lines of 70 bytes at 1 KiB a file, want rotation", len(files))
	}
	for i, f := range files {
		info, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if info.Size() > 1<<10 || info.Mode().Perm() != 0o600 || f.num != uint64(i+1) {
			t.Errorf("file %s: %d bytes, mode %v, want at most 1 KiB, 0600, number %d", f.path, info.Size(), info.Mode().Perm(), i+1)
		}
	}
	for _, dir := range []string{s.root, filepath.Join(s.root, "arena"), filepath.Join(s.root, "arena", "gs-1")} {
		if info, err := os.Stat(dir); err != nil || info.Mode().Perm() != 0o700 {
			t.Errorf("directory %s: %v %v, want 0700", dir, info.Mode().Perm(), err)
		}
	}

	stderrOf := func(lines []string) []string {
		var out []string
		for _, l := range lines {
			if strings.HasPrefix(l, stderrName) {
				out = append(out, l)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		req  *agentv1.LogsRequest
		want []string
	}{
		{"everything", &agentv1.LogsRequest{}, want},
		{"stderr", &agentv1.LogsRequest{Stream: agentv1.LogLine_STDERR}, stderrOf(want)},
		{"tail", &agentv1.LogsRequest{TailLines: 7}, want[93:]},
		{"tail of stderr", &agentv1.LogsRequest{TailLines: 3, Stream: agentv1.LogLine_STDERR}, stderrOf(want)[47:]},
		{"tail beyond the start", &agentv1.LogsRequest{TailLines: 1000}, want},
		{"since", &agentv1.LogsRequest{SinceTime: timestamppb.New(t0.Add(90 * time.Second))}, want[90:]},
		{"since, the tail of it", &agentv1.LogsRequest{SinceTime: timestamppb.New(t0.Add(90 * time.Second)), TailLines: 20}, want[90:]},
		{"tail, since earlier", &agentv1.LogsRequest{SinceTime: timestamppb.New(t0.Add(10 * time.Second)), TailLines: 4}, want[96:]},
		{"since after the last", &agentv1.LogsRequest{SinceTime: timestamppb.New(t0.Add(time.Hour))}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.GameServer = testServer
			got, last := readAll(t, s, tc.req)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("read %d lines:\n%s\nwant %d:\n%s", len(got), strings.Join(got, "\n"), len(tc.want), strings.Join(tc.want, "\n"))
			}
			if last.GetEnded() {
				t.Error("the log of a server the agent supervises ended")
			}
		})
	}

	// The times are the clock's, to the nanosecond.
	reply := s.read(context.Background(), &agentv1.LogsRequest{GameServer: testServer, TailLines: 1}, 1<<20)
	if got := reply.GetLines()[0].GetTime().AsTime(); !got.Equal(t0.Add(99 * time.Second)) {
		t.Errorf("the last line's time %v, want %v", got, t0.Add(99*time.Second))
	}

	// Once released with no pipe open, the log has ended: a read that
	// catches up says so.
	l.release()
	if _, last := readAll(t, s, &agentv1.LogsRequest{GameServer: testServer, TailLines: 1}); !last.GetEnded() {
		t.Error("the log of a released server has not ended")
	}
	if s.lookup(testServer) != nil {
		t.Error("an ended log is still active")
	}
}

func TestLogReadsInChunksWithoutGapsOrDuplicates(t *testing.T) {
	clock := &testClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := newTestLogStore(t, LogOptions{FileMaxBytes: 100 << 10}, clock)
	l, err := s.server(testServer)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 3000 {
		text := fmt.Sprintf("%05d %s", i, strings.Repeat("y", 100))
		writeLine(l, stdoutName, false, text)
		want = append(want, "stdout "+text)
	}
	chunks := 0
	var got []string
	req := &agentv1.LogsRequest{GameServer: testServer, MaxBytes: minLogChunk}
	for {
		reply := s.read(context.Background(), req, 1<<20)
		chunks++
		for _, l := range reply.GetLines() {
			got = append(got, "stdout "+string(l.GetText()))
		}
		if reply.GetCaughtUp() {
			break
		}
		req = &agentv1.LogsRequest{GameServer: testServer, MaxBytes: minLogChunk, Cursor: reply.GetNext()}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("read %d lines in %d chunks, want the %d written in order", len(got), chunks, len(want))
	}
	if chunks < 5 {
		t.Errorf("%d chunks for %d KiB at 64 KiB a chunk", chunks, 3000*140/1024)
	}
}

// A line longer than a log line holds is split into parts, and output
// that ends without a newline ends with a part: the copier from a real
// pipe.
func TestLongLinesArePartial(t *testing.T) {
	clock := &testClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := newTestLogStore(t, LogOptions{}, clock)
	l, err := s.server(testServer)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.copiers++
	l.mu.Unlock()
	done := make(chan struct{})
	go func() { l.copy(stdoutName, r); close(done) }()
	long := strings.Repeat("z", 40<<10)
	if _, err := io.WriteString(w, long+"\nshort\nno newline"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	<-done
	reply := s.read(context.Background(), &agentv1.LogsRequest{GameServer: testServer}, 1<<20)
	type part struct {
		n       int
		partial bool
	}
	var got []part
	for _, l := range reply.GetLines() {
		got = append(got, part{len(l.GetText()), l.GetPartial()})
	}
	want := []part{{logLineMax, true}, {logLineMax, true}, {40<<10 - 2*logLineMax, false}, {5, false}, {10, true}}
	if !slices.Equal(got, want) {
		t.Fatalf("parts %v, want %v", got, want)
	}
}

func TestLogReadWaitsForMoreAndEnds(t *testing.T) {
	clock := &testClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := newTestLogStore(t, LogOptions{}, clock)
	l, err := s.server(testServer)
	if err != nil {
		t.Fatal(err)
	}
	writeLine(l, stdoutName, false, "first")
	first := s.read(context.Background(), &agentv1.LogsRequest{GameServer: testServer}, 1<<20)
	if len(first.GetLines()) != 1 || !first.GetCaughtUp() || first.GetEnded() {
		t.Fatalf("first read: %v", first)
	}

	waiting := make(chan struct{}, 1)
	s.waiting = func() { waiting <- struct{}{} }
	answered := make(chan *agentv1.LogsReply, 1)
	go func() {
		answered <- s.read(context.Background(), &agentv1.LogsRequest{GameServer: testServer, Cursor: first.GetNext(), WaitMillis: 20_000}, 1<<20)
	}()
	<-waiting // the line comes after the read began to wait
	start := time.Now()
	writeLine(l, stderrName, false, "second")
	var next *agentv1.LogsReply
	select {
	case next = <-answered:
	case <-time.After(15 * time.Second):
		t.Fatal("a waiting read was not answered when a line came")
	}
	if len(next.GetLines()) != 1 || string(next.GetLines()[0].GetText()) != "second" || time.Since(start) > 10*time.Second {
		t.Fatalf("waiting read: %v after %s", next, time.Since(start))
	}

	go func() {
		answered <- s.read(context.Background(), &agentv1.LogsRequest{GameServer: testServer, Cursor: next.GetNext(), WaitMillis: 20_000}, 1<<20)
	}()
	<-waiting
	l.release()
	select {
	case last := <-answered:
		if len(last.GetLines()) != 0 || !last.GetEnded() {
			t.Fatalf("read of a log that ended: %v", last)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a waiting read was not answered when the log ended")
	}
}

func TestLogReadErrors(t *testing.T) {
	clock := &testClock{now: time.Now()}
	s := newTestLogStore(t, LogOptions{}, clock)
	for _, tc := range []struct {
		name string
		req  *agentv1.LogsRequest
		want agentv1.LogsReply_Error
	}{
		{"unknown server", &agentv1.LogsRequest{GameServer: testServer}, agentv1.LogsReply_NOT_FOUND},
		{"not a game server's name", &agentv1.LogsRequest{GameServer: "fleets/arena"}, agentv1.LogsReply_BAD_REQUEST},
		{"a name that climbs out", &agentv1.LogsRequest{GameServer: "fleets/../gameServers/x"}, agentv1.LogsReply_BAD_REQUEST},
		{"unknown stream", &agentv1.LogsRequest{GameServer: testServer, Stream: 7}, agentv1.LogsReply_BAD_REQUEST},
		{"negative tail", &agentv1.LogsRequest{GameServer: testServer, TailLines: -1}, agentv1.LogsReply_BAD_REQUEST},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.read(context.Background(), tc.req, 1<<20); got.GetError() != tc.want || got.GetErrorMessage() == "" {
				t.Fatalf("%v (%s), want %v", got.GetError(), got.GetErrorMessage(), tc.want)
			}
		})
	}
	// A server the agent supervises and whose process has not written yet
	// has no files, and no error.
	if _, err := s.server(testServer); err != nil {
		t.Fatal(err)
	}
	if got := s.read(context.Background(), &agentv1.LogsRequest{GameServer: testServer}, 1<<20); got.GetError() != 0 || !got.GetCaughtUp() || got.GetEnded() {
		t.Fatalf("read of a server with no output yet: %v", got)
	}
}

func TestRetentionRemovesOldFilesAndTheOldestAboveTheLimit(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := &testClock{now: now}
	s := newTestLogStore(t, LogOptions{Retention: 14 * 24 * time.Hour, MaxBytes: 9<<10 + 512, FileMaxBytes: 4 << 10}, clock)

	// Files of ended servers, each 1 KiB, written at the times given.
	put := func(server string, num uint64, age time.Duration) string {
		t.Helper()
		dir := filepath.Join(s.root, "arena", server)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, logFileName(num))
		if err := os.WriteFile(path, []byte(strings.Repeat("a", 1<<10)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
		return path
	}
	expired := put("gs-old", 1, 15*24*time.Hour)
	var aging []string
	for i := range 12 {
		aging = append(aging, put("gs-busy", uint64(i+1), time.Duration(12-i)*time.Hour))
	}
	// A running server's file: old and over the limit, never removed.
	l, err := s.server("fleets/duel/gameServers/gs-live")
	if err != nil {
		t.Fatal(err)
	}
	writeLine(l, stdoutName, false, strings.Repeat("b", 2<<10-logHead-1)) // a line of 2 KiB
	live := l.f.Name()
	if err := os.Chtimes(live, now.Add(-30*24*time.Hour), now.Add(-30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	other := put("gs-other", 1, 0) // not a log file's name: left alone
	if err := os.Rename(other, filepath.Join(filepath.Dir(other), "notes.txt")); err != nil {
		t.Fatal(err)
	}

	res, err := s.retain()
	if err != nil {
		t.Fatal(err)
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	if exists(expired) || exists(filepath.Dir(expired)) {
		t.Error("a file older than the retention, or its emptied directory, is still there")
	}
	// 15 KiB in all (the expired one, 12 of gs-busy, gs-live's 2 KiB):
	// the expired and gs-busy's 5 oldest go, leaving 7 + 2 = 9 KiB, the
	// first total under 9.5 KiB.
	for i, p := range aging {
		if want := i >= 5; exists(p) != want {
			t.Errorf("gs-busy's file %d (%s old) exists %v, want %v", i+1, time.Duration(12-i)*time.Hour, exists(p), want)
		}
	}
	if !exists(live) {
		t.Error("the file a running server writes was removed")
	}
	if !exists(filepath.Join(filepath.Dir(other), "notes.txt")) {
		t.Error("a file that is no log file was removed")
	}
	if res.removed != 6 || res.keptBytes != 9<<10 || res.more {
		t.Errorf("retention: %+v, want 6 files removed and 9 KiB kept", res)
	}

	// Once the running server has ended, its file ages like any other.
	l.release()
	if _, err := s.retain(); err != nil {
		t.Fatal(err)
	}
	if exists(live) || exists(filepath.Join(s.root, "duel")) {
		t.Error("the file of a server that ended, 30 days old, or its fleet's emptied directory, is still there")
	}
}

func TestRetentionRemovesABoundedNumberOfFilesARun(t *testing.T) {
	now := time.Now()
	clock := &testClock{now: now}
	s := newTestLogStore(t, LogOptions{Retention: time.Hour, RetentionEvery: time.Hour}, clock)
	dir := filepath.Join(s.root, "arena", "gs-chatty")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	old := now.Add(-2 * time.Hour)
	for i := range logRemovalsPerRun + 10 {
		path := filepath.Join(dir, logFileName(uint64(i+1)))
		if err := os.WriteFile(path, []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.retain()
	if err != nil {
		t.Fatal(err)
	}
	if res.removed != logRemovalsPerRun || !res.more {
		t.Fatalf("first run: %+v, want %d removed and more", res, logRemovalsPerRun)
	}
	// runRetention runs again at once while there is more, though its
	// period is an hour.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.runRetention(ctx) }()
	wait.For(t, 10*time.Second, "the rest removed and the directory with them", func() bool {
		_, err := os.Stat(dir)
		return os.IsNotExist(err)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestParseLogLine(t *testing.T) {
	clock := &testClock{now: time.Date(2026, 3, 1, 12, 0, 0, 123, time.UTC)}
	s := newTestLogStore(t, LogOptions{}, clock)
	l := &serverLog{store: s}
	line := l.formatLine(nil, stderrName, true, []byte("hello world"))
	if string(line) != "2026-03-01T12:00:00.000000123Z stderr P hello world\n" {
		t.Fatalf("formatted %q", line)
	}
	ts, stream, partial, text, ok := parseLogLine(line[:len(line)-1])
	if !ok || !ts.Equal(clock.Now()) || stream != stderrName || !partial || string(text) != "hello world" {
		t.Fatalf("parsed %v %q %v %q %v", ts, stream, partial, text, ok)
	}
	for _, bad := range []string{"", "garbage", "2026-03-01T12:00:00.000000123Z stdin F x", "2026-03-01T12:00:00.000000123Z stdout X x",
		"2026-13-01T12:00:00.000000123Z stdout F x"} {
		if _, _, _, _, ok := parseLogLine([]byte(bad)); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	for _, tc := range []struct {
		name string
		num  uint64
		ok   bool
	}{{"0000000001.log", 1, true}, {"0000000042.log", 42, true}, {"12345678901.log", 12345678901, true},
		{"0000000000.log", 0, false}, {"x.log", 0, false}, {".log", 0, false}, {"+1.log", 0, false}, {"0000000001.log.tmp", 0, false}} {
		if n, ok := parseLogFileName(tc.name); n != tc.num || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.name, n, ok, tc.num, tc.ok)
		}
	}
}

// Retention running while a server writes removes only the server's
// oldest whole files: never the file it writes now, never a newer file
// before an older one (the files left are a run of numbers up to the
// newest). A server that rotates files as fast as it can, and retention
// at once after each run, with a limit that removes every file it may;
// on two threads at least, so that the writer moves on in the middle of a
// run (with retention looking at the files written now before listing
// them, this failed within some hundred runs).
func TestRetentionDuringRotationRemovesOnlyTheOldestFiles(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))) // back to what it was
	clock := &testClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := newTestLogStore(t, LogOptions{Retention: time.Hour, MaxBytes: 1, FileMaxBytes: minLogFileMaxBytes}, clock)
	l, err := s.server(testServer)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			writeLine(l, stdoutName, false, fmt.Sprintf("out %d", i))
		}
	}()
	defer func() { close(stop); <-done }()
	dir, _ := s.dirOf(testServer)
	deadline := time.Now().Add(time.Second)
	for run := 0; run < 2000 && time.Now().Before(deadline); run++ {
		if _, err := s.retain(); err != nil {
			t.Fatal(err)
		}
		l.mu.Lock()
		var unlinked string
		if l.f != nil {
			if info, err := l.f.Stat(); err == nil && info.Sys().(*syscall.Stat_t).Nlink == 0 {
				unlinked = l.f.Name()
			}
		}
		files, err := listLogFiles(dir)
		l.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if unlinked != "" {
			t.Fatalf("run %d: retention removed %s, the file the server writes now: its lines are lost", run, filepath.Base(unlinked))
		}
		for i := 1; i < len(files); i++ {
			if files[i].num != files[i-1].num+1 {
				t.Fatalf("run %d: files %d and %d are left, %d is gone: retention removed a newer file before an older one",
					run, files[i-1].num, files[i].num, files[i-1].num+1)
			}
		}
	}
}

// A server's files go oldest first by number, whatever their times say: a
// clock set back gives a newer file an older last write, and retention,
// by the limit or by age, leaves it while an older file of the server is
// kept.
func TestRetentionRemovesAServersFilesInOrderWhateverTheirTimes(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := &testClock{now: now}
	s := newTestLogStore(t, LogOptions{Retention: 24 * time.Hour, MaxBytes: 2 << 10}, clock)
	dir := filepath.Join(s.root, "arena", "gs-1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Files 1 to 4 of 1 KiB: 1 written 2 hours ago, 2 (the clock set
	// back) 3 days ago, 3 an hour ago, 4 (set back again) 2 days ago.
	ages := []time.Duration{2 * time.Hour, 72 * time.Hour, time.Hour, 48 * time.Hour}
	var paths []string
	for i, age := range ages {
		path := filepath.Join(dir, logFileName(uint64(i+1)))
		if err := os.WriteFile(path, []byte(strings.Repeat("a", 1<<10)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	res, err := s.retain()
	if err != nil {
		t.Fatal(err)
	}
	// 4 KiB over a limit of 2: the two oldest by number go, though 2 and
	// 4 are older than the retention and 1 and 3 are not.
	for i, p := range paths {
		_, err := os.Stat(p)
		if want := i >= 2; (err == nil) != want {
			t.Errorf("file %d exists %v, want %v", i+1, err == nil, want)
		}
	}
	if res.removed != 2 || res.keptBytes != 2<<10 {
		t.Errorf("retention: %+v, want 2 files removed and 2 KiB kept", res)
	}
}
