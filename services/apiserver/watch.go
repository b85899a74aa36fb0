package apiserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/projections"
	eventsv1 "github.com/tetherhq/tether/proto/tether/events/v1"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// ReasonWatchFellBehind is the ErrorInfo reason of a watch ended because
// its client stopped reading (RESOURCE_EXHAUSTED).
const ReasonWatchFellBehind = "WATCH_FELL_BEHIND"

// WatchAfterSequenceHeader is the response header (gRPC metadata; REST
// "Grpc-Metadata-Tether-After-Sequence") in which WatchEvents says after
// which sequence it starts: the after_sequence a client resumes with when
// it received no event yet, e.g. after starting with 0 ("from now").
const WatchAfterSequenceHeader = "tether-after-sequence"

// Defaults of Options.WatchBuffer, WatchBufferBytes, WatchTotalBytes and
// WatchStall. A watch's events are bounded in count and in bytes: a
// thousand events of large templates would otherwise hold a megabyte each;
// and every watch's bytes together: sixteen watches at their bound.
const (
	DefaultWatchBuffer      = 1024
	DefaultWatchBufferBytes = 4 << 20
	DefaultWatchTotalBytes  = 64 << 20
	DefaultWatchStall       = 10 * time.Second
)

// eventWatcher streams events as they are stored (events/natsjs.Store).
type eventWatcher interface {
	Watch(ctx context.Context, after, until uint64, subjects []string) iter.Seq2[events.Envelope, error]
	SequenceAt(ctx context.Context, t time.Time) (uint64, error)
	StreamLastSequence(ctx context.Context) (uint64, error)
}

// watchFilter is a WatchEvents request's selection.
type watchFilter struct {
	// subjects narrow what the store reads; nil reads every event.
	subjects []string
	// sessions, when set (a fleet filter), keeps the game-session and
	// player-session events of the fleet's game sessions; the subjects
	// read every session's.
	sessions *sessionFleets
	// host, when set, keeps events written by that host or about it.
	host  string
	types map[string]bool
}

// match reports whether the watch keeps e; an error means it cannot tell
// (a session's fleet could not be read).
func (f watchFilter) match(ctx context.Context, e events.Envelope) (bool, error) {
	if f.host != "" && e.Producer != f.host && e.Aggregate != f.host {
		return false, nil
	}
	if len(f.types) != 0 && !f.types[e.Type] {
		return false, nil
	}
	if f.sessions == nil {
		return true, nil
	}
	return f.sessions.keeps(ctx, e)
}

// sessionFleets keeps, for a watch filtered by fleet, the events of the
// fleet's game sessions and their player sessions, which are named
// gameSessions/{id}, without their fleet: a session's fleet is its game
// server's, from its GameSessionCreated when the watch sees it, or else
// from the views, or else (the views do not show it yet: a watch resumed
// after the session's creation while the projector is behind) from its
// GameSessionCreated read from the stream's leader; remembered for the
// watch.
type sessionFleets struct {
	fleet  string // fleets/{fleet}
	lookup func(ctx context.Context, session string) (projections.Row[*eventsv1.GameSessionState], error)
	first  func(ctx context.Context, subject string) (events.Envelope, bool, error)
	known  map[string]bool // game session → of the fleet
}

// maxKnownSessions bounds sessionFleets.known; past it, it starts afresh
// (a session seen again is looked up again).
const maxKnownSessions = 10_000

// keeps reports whether e is kept: any event not of a game session (the
// subjects chose it), and a session's if the session is the fleet's. An
// error means the session's fleet could not be read: the watch cannot
// tell, and must not drop the event silently.
func (s *sessionFleets) keeps(ctx context.Context, e events.Envelope) (bool, error) {
	id, ok := strings.CutPrefix(e.Aggregate, "gameSessions/")
	if !ok {
		return true, nil
	}
	session := "gameSessions/" + strings.SplitN(id, "/", 2)[0]
	if mine, ok := s.known[session]; ok {
		return mine, nil
	}
	server, ok, err := s.serverOf(ctx, session, e)
	if err != nil || !ok {
		// Neither in the views nor in the stream (archived before the
		// watch's range): not known to be the fleet's, and not
		// remembered, so a later event asks again.
		return false, err
	}
	fleet, _, err := events.ParseGameServerName(server)
	mine := err == nil && events.FleetName(fleet) == s.fleet
	if len(s.known) >= maxKnownSessions {
		clear(s.known)
	}
	s.known[session] = mine
	return mine, nil
}

// serverOf finds the game server of session, of which e is an event:
// ok=false when neither the views nor the stream hold the session.
func (s *sessionFleets) serverOf(ctx context.Context, session string, e events.Envelope) (string, bool, error) {
	if created, ok := e.Data.(*eventsv1.GameSessionCreated); ok {
		return created.GetGameServer(), true, nil
	}
	row, err := s.lookup(ctx, session)
	switch {
	case err == nil:
		return row.State.GetGameServer(), true, nil
	case !errors.Is(err, projections.ErrNotFound):
		return "", false, err
	}
	first, found, err := s.first(ctx, events.MustSubject(session))
	if err != nil || !found {
		return "", false, err
	}
	created, ok := first.Data.(*eventsv1.GameSessionCreated)
	return created.GetGameServer(), ok, nil
}

// learn remembers the fleet of an archived game session from its first
// event, its GameSessionCreated: the views no longer hold it, and a watch
// that starts after that event would not see it.
func (s *sessionFleets) learn(first events.Envelope) {
	created, ok := first.Data.(*eventsv1.GameSessionCreated)
	if !ok {
		return
	}
	fleet, _, err := events.ParseGameServerName(created.GetGameServer())
	if len(s.known) >= maxKnownSessions {
		clear(s.known)
	}
	s.known[first.Aggregate] = err == nil && events.FleetName(fleet) == s.fleet
}

// parseWatchFilter validates a request's filters. A fleet's game sessions
// are looked up in views, then in the stream.
func parseWatchFilter(req *tetherv1.WatchEventsRequest, views viewReader, store eventStore) (watchFilter, error) {
	var f watchFilter
	if fleet := req.GetFleet(); fleet != "" {
		id, ok := strings.CutPrefix(fleet, "fleets/")
		if !ok || events.CheckID(id) != nil {
			return f, invalidField("fleet", fmt.Sprintf("%q is not a fleet name (fleets/{fleet})", fleet))
		}
		f.subjects = append([]string{events.MustSubject(fleet), events.FleetGameServersSubject(id)}, events.SessionSubjects()...)
		f.sessions = &sessionFleets{fleet: fleet, lookup: views.GameSession, first: store.FirstEvent, known: map[string]bool{}}
	}
	if host := req.GetHost(); host != "" {
		id, ok := strings.CutPrefix(host, "hosts/")
		if !ok || events.CheckID(id) != nil {
			return f, invalidField("host", fmt.Sprintf("%q is not a host name (hosts/{host})", host))
		}
		f.host = host
	}
	pkg := (&eventsv1.Envelope{}).ProtoReflect().Descriptor().ParentFile().Package()
	for _, t := range req.GetTypes() {
		if _, err := protoregistry.GlobalTypes.FindMessageByName(pkg.Append(protoreflect.Name(t))); err != nil || t == "" {
			return f, invalidField("types", fmt.Sprintf("%q is not an event type", t))
		}
		if f.types == nil {
			f.types = map[string]bool{}
		}
		f.types[t] = true
	}
	return f, nil
}

// watchRange resolves where a watch starts (after) and, for a bounded one
// (end_time set), the last sequence it may deliver (until; bounded=true).
func watchRange(ctx context.Context, w eventWatcher, req *tetherv1.WatchEventsRequest) (after, until uint64, bounded bool, err error) {
	switch {
	case req.GetAfterSequence() < 0:
		return 0, 0, false, invalidField("after_sequence", "must not be negative")
	case req.GetStartTime() != nil && req.GetAfterSequence() != 0:
		return 0, 0, false, invalidField("start_time", "set start_time or after_sequence, not both")
	case req.GetEndTime() != nil && req.GetStartTime() == nil && req.GetAfterSequence() == 0:
		return 0, 0, false, invalidField("end_time", "needs start_time or after_sequence")
	case req.GetStartTime() != nil:
		first, err := w.SequenceAt(ctx, req.GetStartTime().AsTime())
		if err != nil {
			return 0, 0, false, err
		}
		after = first - 1
	case req.GetAfterSequence() > 0:
		after = uint64(req.GetAfterSequence())
	default:
		if after, err = w.StreamLastSequence(ctx); err != nil {
			return 0, 0, false, err
		}
	}
	if req.GetEndTime() == nil {
		return after, 0, false, nil
	}
	head, err := w.StreamLastSequence(ctx)
	if err != nil {
		return 0, 0, false, err
	}
	end, err := w.SequenceAt(ctx, req.GetEndTime().AsTime())
	if err != nil {
		return 0, 0, false, err
	}
	return after, min(head, end-1), true, nil
}

// WatchEvents streams events as they are stored, oldest first, from after
// after_sequence (0: from now; or from start_time), filtered by fleet, host
// and types, until the client goes away, or, with end_time, until the
// events stored before end_time have been sent. A client resuming with the
// last sequence it received gets the next matching event: no gap, no
// duplicate. The response header WatchAfterSequenceHeader says where the
// watch starts.
//
// Idle watches: gRPC clients get HTTP/2 pings every Options.Keepalive, so
// no load balancer sees an idle flow and neither side keeps a half-open
// one. REST clients (newline-delimited JSON through the gateway, GET
// /v1/events:watch) get no pings: behind a load balancer with an idle
// timeout they must expect the stream to end and reconnect with
// after_sequence set to the last sequence they received.
//
// Memory: the server pulls events no faster than the client reads them and
// holds at most Options.WatchBuffer of them, encoded, within
// Options.WatchBufferBytes, and every watch's within WatchTotalBytes
// together (watchBudget); besides, one pull of the store's (at most NATS's
// max_payload) and the transport's windows (64 KiB; the REST gateway's
// too). A client that reads nothing for Options.WatchStall while events
// wait for it, or whose watch holds the most when the watches would take
// more than WatchTotalBytes, gets RESOURCE_EXHAUSTED (reason
// WATCH_FELL_BEHIND) saying the after_sequence to resume with. Events the
// server cannot decode are logged and skipped.
func (h *historyService) WatchEvents(req *tetherv1.WatchEventsRequest, stream grpc.ServerStreamingServer[tetherv1.Event]) error {
	w := h.s.opts.Watch
	if w == nil {
		return &apiError{code: codes.Unimplemented, reason: "UNIMPLEMENTED", msg: "this API server has no event watch configured"}
	}
	f, err := parseWatchFilter(req, h.s.opts.Views, h.s.opts.Store)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	after, until, bounded, err := watchRange(ctx, w, req)
	if err != nil {
		return err
	}
	if err := stream.SendHeader(metadata.Pairs(WatchAfterSequenceHeader, strconv.FormatUint(after, 10))); err != nil {
		return fmt.Errorf("watch: send header: %w", err)
	}
	h.s.log.Debug("watch started", "after", after, "until", until, "fleet", req.GetFleet(), "host", req.GetHost(), "types", req.GetTypes())
	evs, err := h.watched(ctx, w, req, f, after, until, bounded)
	if err != nil || evs == nil {
		return err
	}
	hold := h.s.watches.open(cancel)
	defer hold.close()
	return h.pump(ctx, hold, evs, f, after, stream.Send)
}

// watched returns what a watch sends before filtering: the stream's
// events after after (up to until when bounded) and, for a watch started
// after a sequence or at a time, the archived events from there on, merged
// with the stream's by sequence (up to the stream's last sequence at the
// start: an unbounded watch then goes on with the stream's). Nil when a
// bounded watch has nothing to send.
func (h *historyService) watched(ctx context.Context, w eventWatcher, req *tetherv1.WatchEventsRequest, f watchFilter,
	after, until uint64, bounded bool) (iter.Seq2[sourced, error], error) {
	arch := h.s.archive
	past := req.GetAfterSequence() > 0 || req.GetStartTime() != nil
	if arch.catalog == nil || !past {
		if bounded && until <= after {
			return nil, nil
		}
		return fromStream(w.Watch(ctx, after, until, f.subjects)), nil
	}
	// Archived events are bounded by their own stored times, not by
	// until: the stream's SequenceAt(end_time) may land on a purged
	// sequence, below archived events stored before end_time.
	head, err := w.StreamLastSequence(ctx)
	if err != nil {
		return nil, err
	}
	if !bounded {
		until = head
	}
	q := archiveRange{after: uint64(req.GetAfterSequence()), until: head, subjects: f.subjects}
	if req.GetStartTime() != nil {
		q.start = req.GetStartTime().AsTime()
	}
	if req.GetEndTime() != nil {
		q.end = req.GetEndTime().AsTime()
	}
	if f.sessions != nil {
		q.learn = f.sessions.learn
	}
	if arch.store == nil {
		// Refused rather than an export with a silent gap.
		seg, ok, err := arch.anyIn(ctx, q)
		if err != nil {
			return nil, err
		}
		if ok {
			return nil, &apiError{code: codes.FailedPrecondition, reason: ReasonArchiveNotRead, msg: fmt.Sprintf(
				"events of this watch are in archive segment %s (and maybe others), and this API server does not read the archive: start it with --archive-dir (the controller's archive directory)", seg)}
		}
	}
	var stream iter.Seq2[events.Envelope, error] = func(func(events.Envelope, error) bool) {}
	if until > after {
		stream = w.Watch(ctx, after, until, f.subjects)
	}
	evs := merge(fromStream(stream), arch.events(ctx, "this watch", q))
	if !bounded {
		evs = concat(evs, fromStream(w.Watch(ctx, head, 0, f.subjects)))
	}
	return evs, nil
}

// pump sends the matching events of evs through send from a goroutine,
// holding at most WatchBuffer of them, within the watch's share of the
// server's watch budget (watchBudget), and returns when evs ends and every
// event was sent, or at the first error.
func (h *historyService) pump(ctx context.Context, hold *watchHold, evs iter.Seq2[sourced, error], f watchFilter, after uint64,
	send func(*tetherv1.Event) error) error {
	p := &watchPump{ctx: ctx, opts: &h.s.opts, log: h.s.log, hold: hold, send: send,
		out: make(chan queuedEvent, h.s.opts.WatchBuffer), stop: make(chan struct{}), senderDone: make(chan error, 1)}
	p.sent.Store(after)
	go func() { p.senderDone <- p.sendAll() }()
	// On an early return the sender may be blocked in send to a client
	// that reads nothing; ending the RPC unblocks it.
	defer close(p.stop)
	for e, err := range evs {
		if errors.Is(err, events.ErrUndecodable) {
			h.s.log.Warn("watch skips an undecodable event", "sequence", e.Sequence, "aggregate", e.Aggregate, "err", err)
			continue
		}
		if err != nil {
			return cmp.Or(p.stopped(), err)
		}
		keep, err := f.match(ctx, e.Envelope)
		if err != nil {
			n := p.resumePoint()
			h.s.log.Warn("watch ended: a session's fleet could not be read", "sequence", e.Sequence, "after_sequence", n, "err", err)
			return &apiError{code: codes.Unavailable, reason: ReasonUnavailable, msg: fmt.Sprintf(
				"the fleet of %s could not be read (%v); resume with after_sequence=%d", e.Aggregate, err, n)}
		}
		if !keep {
			continue
		}
		q, ok := h.encode(e)
		if !ok {
			continue
		}
		if err := p.enqueue(q); err != nil {
			return err
		}
	}
	if err := p.stopped(); err != nil {
		return err
	}
	return p.drain()
}

// encode converts a watched event to the API's and encodes it: what the
// watch holds for its client is the encoding, whose bytes it counts.
func (h *historyService) encode(e sourced) (queuedEvent, bool) {
	ev, err := eventToAPI(e.Envelope)
	if err == nil {
		ev.ArchiveSegment = e.segment
		var raw []byte
		if raw, err = proto.Marshal(ev); err == nil {
			return queuedEvent{seq: uint64(ev.GetSequence()), raw: raw}, true
		}
	}
	h.s.log.Error("watch skips an event it cannot convert", "sequence", e.Sequence, "err", err)
	return queuedEvent{}, false
}

// queuedEvent is an encoded event a watch holds for its client.
type queuedEvent struct {
	seq uint64
	raw []byte // the tetherv1.Event, encoded
}

// encoded returns the event to send: an empty Event whose unknown fields
// are the encoding, which marshals as it is (the client decodes the whole
// Event).
func (q queuedEvent) encoded() *tetherv1.Event {
	ev := &tetherv1.Event{}
	ev.ProtoReflect().SetUnknown(q.raw)
	return ev
}

// watchPump is one watch's queue of events between the store and its
// client's transport.
type watchPump struct {
	ctx  context.Context // ended, with errWatchEvicted, when the budget takes the watch's bytes back
	opts *Options
	log  *slog.Logger
	hold *watchHold
	send func(*tetherv1.Event) error

	out        chan queuedEvent // WatchBuffer events, at most
	stop       chan struct{}    // the watch ended: the sender stops
	senderDone chan error
	sent       atomic.Uint64 // last sequence handed to the transport
	// ended is set, under endMu, when the watch has said where to resume
	// (resumePoint): the sender starts no send after it. The point said is
	// the last event sent, or the one before an event whose send had begun
	// (blocked on a client that reads nothing, it may or may not reach the
	// client: a resume repeats it, never skips one). Without it
	// the sender went on sending while the watch ended: a client got nine
	// events past the point it was told to resume from.
	endMu sync.Mutex
	ended bool
}

// resumePoint ends the sending and returns the after_sequence a client
// resumes with.
func (p *watchPump) resumePoint() uint64 {
	p.endMu.Lock()
	defer p.endMu.Unlock()
	p.ended = true
	return p.sent.Load()
}

// sendAll sends the queued events until out is closed and empty, stop is
// closed, or a send fails; each event's bytes are released once the
// transport has taken it.
func (p *watchPump) sendAll() error {
	for {
		select {
		case <-p.stop:
			return nil
		case q, ok := <-p.out:
			if !ok {
				return nil
			}
			p.endMu.Lock()
			if p.ended {
				p.endMu.Unlock()
				p.hold.release(int64(len(q.raw)))
				return nil
			}
			p.endMu.Unlock()
			err := p.send(q.encoded())
			p.hold.release(int64(len(q.raw)))
			if err != nil {
				return fmt.Errorf("watch: send event %d: %w", q.seq, err)
			}
			p.sent.Store(q.seq)
		}
	}
}

// enqueue reserves q's bytes and queues it, waiting while the client's
// transport still holds what the bounds allow, or until it stalls.
func (p *watchPump) enqueue(q queuedEvent) error {
	if err := p.room(int64(len(q.raw))); err != nil {
		return err
	}
	select {
	case p.out <- q:
		return nil
	default:
	}
	timer := time.NewTimer(p.opts.WatchStall)
	defer timer.Stop()
	select {
	case p.out <- q:
		return nil
	case err := <-p.senderDone:
		return cmp.Or(err, errors.New("watch: the sender stopped"))
	case <-p.ctx.Done():
		return p.stopped()
	case <-timer.C:
		return p.fellBehind()
	}
}

// room waits until the watch's share of the budget has size bytes for
// another event, or the client stalls (WatchStall without a read), or the
// budget ends the watch.
func (p *watchPump) room(size int64) error {
	var stall <-chan time.Time
	for {
		r := p.hold.reserve(size)
		if r.ok {
			return nil
		}
		if r.evicted != nil {
			p.log.Warn("watch ended: the watches hold their total budget", "held_bytes", r.evicted.heldBytes(),
				"watch_total_bytes", p.opts.WatchTotalBytes, "for_itself", r.evicted == p.hold)
			r.evicted.end(errWatchEvicted)
		}
		if stall == nil {
			timer := time.NewTimer(p.opts.WatchStall)
			defer timer.Stop()
			stall = timer.C
		}
		select {
		case <-p.hold.own:
		case <-r.freed:
		case err := <-p.senderDone:
			return cmp.Or(err, errors.New("watch: the sender stopped"))
		case <-p.ctx.Done():
			return p.stopped()
		case <-stall:
			return p.fellBehind()
		}
	}
}

// drain waits, once a bounded watch has queued its last event, until
// everything is sent, as long as the client keeps reading.
func (p *watchPump) drain() error {
	close(p.out)
	last := p.sent.Load()
	tick := time.NewTicker(p.opts.WatchStall)
	defer tick.Stop()
	for {
		select {
		case err := <-p.senderDone:
			return err
		case <-p.ctx.Done():
			return p.stopped()
		case <-tick.C:
			if n := p.sent.Load(); n != last {
				last = n
				continue
			}
			return p.fellBehind()
		}
	}
}

// stopped is the error of a watch whose context ended: WATCH_FELL_BEHIND
// when the budget ended it, else the context's; nil while it goes on.
func (p *watchPump) stopped() error {
	if errors.Is(context.Cause(p.ctx), errWatchEvicted) {
		n := p.resumePoint()
		return &apiError{code: codes.ResourceExhausted, reason: ReasonWatchFellBehind, msg: fmt.Sprintf(
			"fell behind; resume with after_sequence=%d (this API server's watches held their whole budget, %d bytes of events, and this one the most)",
			n, p.opts.WatchTotalBytes)}
	}
	return p.ctx.Err()
}

// fellBehind is the error of a watch whose client read nothing for
// WatchStall while events waited.
func (p *watchPump) fellBehind() error {
	n, held := p.resumePoint(), p.hold.heldBytes()
	p.log.Warn("watch client fell behind", "after_sequence", n, "buffer", p.opts.WatchBuffer, "buffer_bytes", held, "stall", p.opts.WatchStall)
	return &apiError{code: codes.ResourceExhausted, reason: ReasonWatchFellBehind, msg: fmt.Sprintf(
		"fell behind; resume with after_sequence=%d (the client read no event for %s while %d events or %d bytes waited)",
		n, p.opts.WatchStall, len(p.out), held)}
}
