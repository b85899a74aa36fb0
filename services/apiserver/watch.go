package apiserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
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

// Defaults of Options.WatchBuffer, WatchBufferBytes and WatchStall. A
// watch's events are bounded in count and in bytes: a thousand events of
// large templates would otherwise hold a megabyte each.
const (
	DefaultWatchBuffer      = 1024
	DefaultWatchBufferBytes = 4 << 20
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
// holds at most Options.WatchBuffer of them (plus the store's pull batch).
// A client that reads nothing for Options.WatchStall while events wait for
// it gets RESOURCE_EXHAUSTED (reason WATCH_FELL_BEHIND) saying the
// after_sequence to resume with. Events the server cannot decode are logged
// and skipped.
func (h *historyService) WatchEvents(req *tetherv1.WatchEventsRequest, stream grpc.ServerStreamingServer[tetherv1.Event]) error {
	w := h.s.opts.Watch
	if w == nil {
		return &apiError{code: codes.Unimplemented, reason: "UNIMPLEMENTED", msg: "this API server has no event watch configured"}
	}
	f, err := parseWatchFilter(req, h.s.opts.Views, h.s.opts.Store)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
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
	return h.pump(ctx, evs, f, after, stream.Send)
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
// holding at most WatchBuffer of them, and returns when evs ends and every
// event was sent, or at the first error.
func (h *historyService) pump(ctx context.Context, evs iter.Seq2[sourced, error], f watchFilter, after uint64,
	send func(*tetherv1.Event) error) error {
	opts := h.s.opts
	out := make(chan *tetherv1.Event, opts.WatchBuffer)
	stop := make(chan struct{})
	var sent atomic.Uint64 // last sequence handed to the transport
	sent.Store(after)
	var held atomic.Int64                       // bytes of the events in out
	freed := make(chan struct{}, 1)             // the sender took an event out
	sizes := make(chan int, opts.WatchBuffer+1) // each queued event's bytes, in out's order (and the one waiting to enter)
	senderDone := make(chan error, 1)
	go func() {
		senderDone <- func() error {
			for {
				select {
				case <-stop:
					return nil
				case ev, ok := <-out:
					if !ok {
						return nil
					}
					held.Add(-int64(<-sizes))
					select {
					case freed <- struct{}{}:
					default:
					}
					if err := send(ev); err != nil {
						return fmt.Errorf("watch: send event %d: %w", ev.GetSequence(), err)
					}
					sent.Store(uint64(ev.GetSequence()))
				}
			}
		}()
	}()
	// On an early return the sender may be blocked in send to a client
	// that reads nothing; ending the RPC unblocks it.
	defer close(stop)

	fellBehind := func() error {
		n := sent.Load()
		h.s.log.Warn("watch client fell behind", "after_sequence", n, "buffer", opts.WatchBuffer, "buffer_bytes", held.Load(), "stall", opts.WatchStall)
		return &apiError{code: codes.ResourceExhausted, reason: ReasonWatchFellBehind, msg: fmt.Sprintf(
			"fell behind; resume with after_sequence=%d (the client read no event for %s while %d events or %d bytes waited)",
			n, opts.WatchStall, len(out), held.Load())}
	}
	// room waits until size more bytes fit the buffer (an event larger
	// than the whole bound goes alone), or the client stalls.
	room := func(size int) error {
		if held.Load() == 0 || held.Load()+int64(size) <= int64(opts.WatchBufferBytes) {
			return nil
		}
		timer := time.NewTimer(opts.WatchStall)
		defer timer.Stop()
		for held.Load() > 0 && held.Load()+int64(size) > int64(opts.WatchBufferBytes) {
			select {
			case <-freed:
			case err := <-senderDone:
				return cmp.Or(err, errors.New("watch: the sender stopped"))
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
				return fellBehind()
			}
		}
		return nil
	}
	for e, err := range evs {
		if errors.Is(err, events.ErrUndecodable) {
			h.s.log.Warn("watch skips an undecodable event", "sequence", e.Sequence, "aggregate", e.Aggregate, "err", err)
			continue
		}
		if err != nil {
			return err
		}
		keep, err := f.match(ctx, e.Envelope)
		if err != nil {
			n := sent.Load()
			h.s.log.Warn("watch ended: a session's fleet could not be read", "sequence", e.Sequence, "after_sequence", n, "err", err)
			return &apiError{code: codes.Unavailable, reason: ReasonUnavailable, msg: fmt.Sprintf(
				"the fleet of %s could not be read (%v); resume with after_sequence=%d", e.Aggregate, err, n)}
		}
		if !keep {
			continue
		}
		ev, err := eventToAPI(e.Envelope)
		if err != nil {
			h.s.log.Error("watch skips an event it cannot convert", "sequence", e.Sequence, "err", err)
			continue
		}
		ev.ArchiveSegment = e.segment
		size := proto.Size(ev)
		if err := room(size); err != nil {
			return err
		}
		// Counted before it is queued: the sender takes the size out as
		// it takes the event.
		held.Add(int64(size))
		sizes <- size
		select {
		case out <- ev:
			continue
		default:
		}
		timer := time.NewTimer(opts.WatchStall)
		select {
		case out <- ev:
			timer.Stop()
		case err := <-senderDone:
			timer.Stop()
			return err
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
			return fellBehind()
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// A bounded watch ended: wait until everything is sent, as long as the
	// client keeps reading.
	close(out)
	last := sent.Load()
	tick := time.NewTicker(opts.WatchStall)
	defer tick.Stop()
	for {
		select {
		case err := <-senderDone:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if n := sent.Load(); n != last {
				last = n
				continue
			}
			return fellBehind()
		}
	}
}
