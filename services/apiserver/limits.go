package apiserver

import (
	"context"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tetherhq/tether/events"
)

// Reasons of the per-caller limits' refusals (RESOURCE_EXHAUSTED, REST
// 429, with a RetryInfo saying when to try again).
const (
	ReasonRateLimited     = "RATE_LIMITED"
	ReasonTooManyRequests = "TOO_MANY_REQUESTS"
	ReasonTooManyWatches  = "TOO_MANY_WATCHES"
)

// Default per-caller limits (Options.Limits).
const (
	// DefaultRate is the calls per second one caller may make, on average.
	// A matchmaker allocating for a whole region makes thousands.
	DefaultRate = 10000
	// DefaultBurst is how many calls a caller may make at once above
	// the rate.
	DefaultBurst = 20000
	// DefaultMaxConcurrent is the unary calls one caller may have in
	// progress at once.
	DefaultMaxConcurrent = 512
	// DefaultMaxWatches is the streams (event watches) one caller may hold
	// open at once: dashboards and tools, a handful each.
	DefaultMaxWatches = 32
)

// Limits bound what one caller may ask of an API replica, so that one
// caller (a runaway script, a leaked key) cannot starve the others. A
// caller is its principal with API keys, else its address. Zero fields
// take the defaults; a negative field turns its limit off.
type Limits struct {
	// Rate is the calls per second a caller may make on average, Burst
	// how many at once above it.
	Rate  float64
	Burst int
	// MaxConcurrent bounds a caller's unary calls in progress.
	MaxConcurrent int
	// MaxWatches bounds a caller's open streams.
	MaxWatches int
}

func (l *Limits) setDefaults() {
	if l.Rate == 0 {
		l.Rate = DefaultRate
	}
	if l.Burst == 0 {
		l.Burst = DefaultBurst
	}
	if l.MaxConcurrent == 0 {
		l.MaxConcurrent = DefaultMaxConcurrent
	}
	if l.MaxWatches == 0 {
		l.MaxWatches = DefaultMaxWatches
	}
}

// callerState is one caller's counters.
type callerState struct {
	limiter  *rate.Limiter // nil: no rate limit
	inFlight int
	watches  int
	lastSeen time.Time
}

// limiter applies Limits per caller. Callers idle for idleAfter are
// forgotten, so callers known by address do not accumulate.
type limiter struct {
	limits Limits
	now    func() time.Time
	// gateway is the local address of the REST gateway's own listener:
	// a call arriving there comes from the gateway, whose x-forwarded-for
	// names the REST client (anywhere else that metadata is the caller's
	// say-so, and ignored).
	gateway string

	mu      sync.Mutex
	callers map[string]*callerState
	swept   time.Time
}

// idleAfter is how long an idle caller's counters are kept.
const idleAfter = 10 * time.Minute

func newLimiter(l Limits, now func() time.Time) *limiter {
	l.setDefaults()
	return &limiter{limits: l, now: now, callers: map[string]*callerState{}}
}

// caller names who a call is from: its principal (the actor the
// authenticator set), else its address: the REST client's for a call
// through the gateway, the peer's for a gRPC call.
func (l *limiter) caller(ctx context.Context) string {
	if a := events.ActorFrom(ctx); a != "" {
		return a
	}
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "unknown"
	}
	if p.LocalAddr != nil && p.LocalAddr.String() == l.gateway {
		md, _ := metadata.FromIncomingContext(ctx)
		if fwd := md.Get("x-forwarded-for"); len(fwd) > 0 {
			first, _, _ := strings.Cut(fwd[0], ",")
			return strings.TrimSpace(first)
		}
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return p.Addr.String()
	}
	return host
}

// stateLocked returns who's counters, made on first use.
func (l *limiter) stateLocked(who string, now time.Time) *callerState {
	if now.Sub(l.swept) > idleAfter {
		for k, c := range l.callers {
			if c.inFlight == 0 && c.watches == 0 && now.Sub(c.lastSeen) > idleAfter {
				delete(l.callers, k)
			}
		}
		l.swept = now
	}
	c, ok := l.callers[who]
	if !ok {
		c = &callerState{}
		if l.limits.Rate > 0 {
			c.limiter = rate.NewLimiter(rate.Limit(l.limits.Rate), max(l.limits.Burst, 1))
		}
		l.callers[who] = c
	}
	c.lastSeen = now
	return c
}

// admit counts a call in, or refuses it; the returned release counts it
// out.
func (l *limiter) admit(ctx context.Context, stream bool) (release func(), err error) {
	who := l.caller(ctx)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.stateLocked(who, now)
	switch {
	case stream && l.limits.MaxWatches > 0 && c.watches >= l.limits.MaxWatches:
		return nil, exhausted(ReasonTooManyWatches, 5*time.Second,
			fmt.Sprintf("%s holds %d open streams, the most one caller may; close one, or retry later", who, c.watches))
	case !stream && l.limits.MaxConcurrent > 0 && c.inFlight >= l.limits.MaxConcurrent:
		return nil, exhausted(ReasonTooManyRequests, 100*time.Millisecond,
			fmt.Sprintf("%s has %d calls in progress, the most one caller may; retry shortly", who, c.inFlight))
	}
	if c.limiter != nil {
		r := c.limiter.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return nil, exhausted(ReasonRateLimited, d,
				fmt.Sprintf("%s calls faster than %g per second; retry in %s", who, l.limits.Rate, d.Round(time.Millisecond)))
		}
	}
	if stream {
		c.watches++
	} else {
		c.inFlight++
	}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if stream {
			c.watches--
		} else {
			c.inFlight--
		}
	}, nil
}

// exhausted is RESOURCE_EXHAUSTED with its reason and a RetryInfo.
func exhausted(reason string, retryAfter time.Duration, msg string) error {
	st := reasonStatus(codes.ResourceExhausted, reason, msg)
	retry := durationpb.New(time.Duration(math.Ceil(float64(retryAfter)/float64(time.Millisecond))) * time.Millisecond)
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: retry}); err == nil {
		st = d
	}
	return st.Err()
}

// retryAfter returns a status's RetryInfo delay, ok=false without one.
func retryAfter(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

func (l *limiter) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		release, err := l.admit(ctx, false)
		if err != nil {
			return nil, err
		}
		defer release()
		return handler(ctx, req)
	}
}

func (l *limiter) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		release, err := l.admit(ss.Context(), true)
		if err != nil {
			return err
		}
		defer release()
		return handler(srv, ss)
	}
}
