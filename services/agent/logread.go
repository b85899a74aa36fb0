package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/tetherhq/tether/proto/tether/agent/v1"
	"github.com/tetherhq/tether/services/nats/hostlogs"
)

// Bounds of one log read's answer. It holds at most the asked max_bytes
// of lines, at least minLogChunk, and leaves replyHeadroom of the NATS
// connection's largest message for the rest of the reply. It scans at most
// logScanFactor times its size of lines another stream's or older than
// since_time, so a read that finds few never runs long: the reader asks
// again from its cursor.
const (
	minLogChunk   = 64 << 10
	replyHeadroom = 32 << 10
	logScanFactor = 8
	// lineOverhead is about what a line costs in a reply besides its text.
	lineOverhead = 24
	// tailBlock is what a tail reads of a file at a time, from its end.
	tailBlock = 64 << 10
)

// logHead is the width of a log line before its text:
// "<time> <stream> <F|P> ".
const logHead = len(logTimeLayout) + 1 + len(stdoutName) + 3

// lineFilter selects lines: one stream ("" for both), at or after since.
type lineFilter struct {
	stream string
	since  time.Time
}

// keep reports whether a line of stream at t is selected.
func (f lineFilter) keep(stream string, t time.Time) bool {
	return (f.stream == "" || f.stream == stream) && !t.Before(f.since)
}

// parseLogLine splits a log line (without its newline) into its parts;
// ok=false for one that is not a log line.
func parseLogLine(b []byte) (t time.Time, stream string, partial bool, text []byte, ok bool) {
	const ts = len(logTimeLayout)
	if len(b) < logHead || b[ts] != ' ' || b[ts+7] != ' ' || b[ts+9] != ' ' {
		return t, "", false, nil, false
	}
	switch s := string(b[ts+1 : ts+7]); s {
	case stdoutName, stderrName:
		stream = s
	default:
		return t, "", false, nil, false
	}
	switch b[ts+8] {
	case 'F':
	case 'P':
		partial = true
	default:
		return t, "", false, nil, false
	}
	t, err := time.Parse(logTimeLayout, string(b[:ts]))
	if err != nil {
		return t, "", false, nil, false
	}
	return t, stream, partial, b[logHead:], true
}

// streamName is a request's stream as log lines name it ("" for both).
func streamName(s agentv1.LogLine_Stream) (string, bool) {
	switch s {
	case agentv1.LogLine_STREAM_UNSPECIFIED:
		return "", true
	case agentv1.LogLine_STDOUT:
		return stdoutName, true
	case agentv1.LogLine_STDERR:
		return stderrName, true
	}
	return "", false
}

// logReplyError is a reply that is an error.
func logReplyError(code agentv1.LogsReply_Error, format string, args ...any) *agentv1.LogsReply {
	return &agentv1.LogsReply{Error: code, ErrorMessage: fmt.Sprintf(format, args...)}
}

// read answers one log read (hostlogs.Handler): a chunk of the server's
// lines from the request's cursor, or from where tail_lines and
// since_time start. With a wait, a read that finds nothing new in a log
// that has not ended waits for more, up to the wait.
func (s *logStore) read(ctx context.Context, req *agentv1.LogsRequest, maxPayload int) *agentv1.LogsReply {
	name := req.GetGameServer()
	dir, err := s.dirOf(name)
	if err != nil {
		return logReplyError(agentv1.LogsReply_BAD_REQUEST, "game server: %v", err)
	}
	stream, ok := streamName(req.GetStream())
	if !ok {
		return logReplyError(agentv1.LogsReply_BAD_REQUEST, "stream: no stream %d", req.GetStream())
	}
	if req.GetTailLines() < 0 {
		return logReplyError(agentv1.LogsReply_BAD_REQUEST, "tail lines: %d is negative", req.GetTailLines())
	}
	f := lineFilter{stream: stream}
	if req.GetSinceTime() != nil {
		f.since = req.GetSinceTime().AsTime()
	}
	budget := max(minLogChunk, min(int(req.GetMaxBytes()), maxPayload-replyHeadroom))
	wait := hostlogs.Wait(req)
	deadline := time.Now().Add(wait) // the wait is real time, whatever the clock of the lines
	cursor := req.GetCursor()
	for {
		// Whether the log has ended is read before the files: a log that
		// had ended then has all of its lines in them.
		ended, changed := true, (<-chan struct{})(nil)
		l := s.lookup(name)
		if l != nil {
			ended, changed = l.state()
		}
		files, err := listLogFiles(dir)
		if err != nil {
			return logReplyError(agentv1.LogsReply_UNREADABLE, "list the log files of %s: %v", name, err)
		}
		if len(files) == 0 && l == nil {
			return logReplyError(agentv1.LogsReply_NOT_FOUND,
				"this host keeps no log of %s: it never ran here, or retention has removed its files", name)
		}
		if cursor == nil {
			cursor = startCursor(files, int(req.GetTailLines()), f)
		}
		reply, err := readLogChunk(dir, files, cursor, f, budget)
		if err != nil {
			return logReplyError(agentv1.LogsReply_UNREADABLE, "read the log files of %s: %v", name, err)
		}
		reply.Ended = reply.GetCaughtUp() && ended
		if len(reply.GetLines()) > 0 || !reply.GetCaughtUp() || ended || !time.Now().Before(deadline) {
			return reply
		}
		if s.waiting != nil {
			s.waiting()
		}
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-changed:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
		if ctx.Err() != nil {
			return reply
		}
		cursor = reply.GetNext()
	}
}

// startCursor is where a read without a cursor starts: the last tail
// lines f selects, or (tail 0) the first file that may hold a line f
// selects.
func startCursor(files []logFile, tail int, f lineFilter) *agentv1.LogCursor {
	if len(files) == 0 {
		return &agentv1.LogCursor{}
	}
	if tail > 0 {
		need := tail
		for i := len(files) - 1; i >= 0; i-- {
			off, found, stop, err := scanBack(files[i].path, need, f)
			if err != nil {
				continue // removed meanwhile, or unreadable: the forward read says so
			}
			need -= found
			if need <= 0 || stop {
				return &agentv1.LogCursor{File: files[i].num, Offset: off}
			}
		}
		return &agentv1.LogCursor{File: files[0].num}
	}
	if !f.since.IsZero() {
		// A file last written before since holds no line at or after it.
		for _, file := range files {
			if info, err := os.Stat(file.path); err == nil && !info.ModTime().Before(f.since) {
				return &agentv1.LogCursor{File: file.num}
			}
		}
		last := files[len(files)-1]
		var size int64
		if info, err := os.Stat(last.path); err == nil {
			size = info.Size()
		}
		return &agentv1.LogCursor{File: last.num, Offset: size}
	}
	return &agentv1.LogCursor{File: files[0].num}
}

// scanBack walks a file's whole lines from its end, and returns the
// offset of the line that makes need lines f selects (found = need), or,
// at a line older than f.since, the offset after it (stop). Having walked
// the whole file without either, it returns offset 0 and what it found.
// A last line without its newline (still being written) is left out.
func scanBack(path string, need int, f lineFilter) (off int64, found int, stop bool, err error) {
	file, err := os.Open(path)
	if err != nil {
		return 0, 0, false, err
	}
	defer file.Close() // read only
	info, err := file.Stat()
	if err != nil {
		return 0, 0, false, err
	}
	buf := make([]byte, tailBlock)
	hi := info.Size() // lines in [0, hi) are still to walk; past a newline, once trimmed
	trimmed := false
	for hi > 0 {
		lo := max(0, hi-tailBlock)
		b := buf[:hi-lo]
		if _, err := file.ReadAt(b, lo); err != nil && !errors.Is(err, io.EOF) {
			return 0, found, false, err
		}
		if !trimmed {
			j := bytes.LastIndexByte(b, '\n')
			if j < 0 {
				hi = lo // no whole line here
				continue
			}
			b, trimmed = b[:j+1], true
		}
		e := len(b) // b[:e] ends with a newline: the end of the next line to walk
		for e > 0 {
			s := bytes.LastIndexByte(b[:e-1], '\n') + 1
			if s == 0 && lo > 0 {
				break // the line may start in the block before: read again from there
			}
			if t, stream, _, _, ok := parseLogLine(b[s : e-1]); ok {
				if t.Before(f.since) {
					return lo + int64(e), found, true, nil
				}
				if f.keep(stream, t) {
					if found++; found >= need {
						return lo + int64(s), found, false, nil
					}
				}
			}
			e = s
		}
		if e == len(b) && lo > 0 {
			e = 0 // a block without a line's start: not log lines; skip it
		}
		hi = lo + int64(e)
	}
	return 0, found, false, nil
}

// readLogChunk reads the lines f selects from cursor on, at most budget
// bytes of them, across files. At a file's end it moves to the next one
// only once the next exists and the file has nothing more: a file is
// final once the writer has started the next. A cursor whose file retention
// removed goes on at the next file.
func readLogChunk(dir string, files []logFile, cursor *agentv1.LogCursor, f lineFilter, budget int) (*agentv1.LogsReply, error) {
	num, off := cursor.GetFile(), cursor.GetOffset()
	reply := &agentv1.LogsReply{}
	var buf []byte // what readAt read last; its room is reused
	used, scanned := 0, 0
	find := func() (cur, next *logFile) {
		for i := range files {
			switch {
			case files[i].num == num:
				cur = &files[i]
			case files[i].num > num && next == nil:
				next = &files[i]
			}
		}
		return cur, next
	}
	// readLines reads what follows off in the file and takes its whole
	// lines; it reports how many bytes it took.
	readLines := func(path string) (int, error) {
		var err error
		if buf, err = readAt(path, off, budget-used, buf); err != nil {
			return 0, err
		}
		n := len(buf)
		took := 0
		for took < n {
			i := bytes.IndexByte(buf[took:n], '\n')
			if i < 0 {
				break
			}
			line := buf[took : took+i]
			took += i + 1
			t, stream, partial, text, ok := parseLogLine(line)
			if !ok || !f.keep(stream, t) {
				continue
			}
			s := agentv1.LogLine_STDOUT
			if stream == stderrName {
				s = agentv1.LogLine_STDERR
			}
			reply.Lines = append(reply.Lines, &agentv1.LogLine{Time: timestamppb.New(t), Stream: s, Text: bytes.Clone(text), Partial: partial})
			used += len(text) + lineOverhead
		}
		scanned += took
		off += int64(took)
		return took, nil
	}
	for {
		reply.Next = &agentv1.LogCursor{File: num, Offset: off}
		if budget-used < logLineMax+logHead+1 || scanned >= logScanFactor*budget {
			return reply, nil // full: the reader asks again from Next
		}
		cur, next := find()
		if cur == nil {
			if next == nil {
				reply.CaughtUp = true
				return reply, nil
			}
			num, off = next.num, 0
			continue
		}
		took, err := readLines(cur.path)
		if errors.Is(err, os.ErrNotExist) {
			if files, err = listLogFiles(dir); err != nil {
				return nil, err
			}
			continue // removed by retention: on at the next file
		}
		if err != nil {
			return nil, err
		}
		if took > 0 {
			continue
		}
		// Nothing whole after off: is this the last file?
		if files, err = listLogFiles(dir); err != nil {
			return nil, err
		}
		_, next = find()
		if next == nil {
			reply.CaughtUp = true
			return reply, nil
		}
		// The writer has started the next file, so this one is final:
		// what it wrote last may have come after the read above.
		if took, err = readLines(cur.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		if took == 0 {
			num, off = next.num, 0 // what is left, if anything, is no whole line
		}
	}
}

// readAt reads what the file at path holds from off on, at most limit
// bytes, into buf (grown if it has too little room), and returns them.
func readAt(path string, off int64, limit int, buf []byte) ([]byte, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close() // read only
	st, err := file.Stat()
	if err != nil {
		return nil, err
	}
	// No more room than the file has after off: a follow asks every time a
	// line is written, and would otherwise take a whole chunk's worth.
	n := int(max(0, min(int64(limit), st.Size()-off)))
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	got, err := file.ReadAt(buf[:n], off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return buf[:got], err
}
