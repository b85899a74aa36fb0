// Package allocload is a matchmaker's load on Tether's allocation API: C
// concurrent callers call AllocateGameServer (tether.v1 AllocationService)
// over real gRPC connections, each call with its own request id, for a
// while, and the result is the allocations per second, the latency
// quantiles and the errors by gRPC code, as a matchmaker sees them.
//
// A run can be sustained with a fixed pool of real game servers: with
// Return set, each allocated server is handed back as a game does at the
// end of its match. ReturnByReady does it for the example game server
// (sdk/go/example/gameserver): once the server shows its allocation, it is
// told "READY" on its game port and calls the SDK's Ready, which ends the
// game session and makes it READY again.
package allocload

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// Defaults of Options.
const (
	DefaultCallers    = 32
	DefaultDuration   = 10 * time.Second
	DefaultRetryPause = 10 * time.Millisecond
	DefaultReturners  = 64
	DefaultCallWait   = 10 * time.Second
)

// Options configure a run.
type Options struct {
	// Targets are the API replicas' gRPC addresses; caller i calls
	// Targets[i % len(Targets)], over one connection per target shared by
	// that target's callers, as a matchmaker's client would.
	Targets []string
	// Key is the API key sent as "authorization: Bearer KEY"; empty sends none.
	Key string
	// Parent is the fleet to allocate from ("fleets/arena", or "fleets/-").
	Parent string
	// Players is the number of players of each allocation (default 2).
	Players int
	// Callers is the number of concurrent callers; default DefaultCallers.
	Callers int
	// Duration is how long the callers call; default DefaultDuration.
	Duration time.Duration
	// Max bounds the allocations of the run (0: Duration only).
	Max int
	// RetryPause is a caller's pause after RESOURCE_EXHAUSTED (no READY
	// server, or a limit), as a matchmaker's back-off; default
	// DefaultRetryPause.
	RetryPause time.Duration
	// CallWait bounds one call; default DefaultCallWait.
	CallWait time.Duration
	// RequestPrefix starts every request id (default "allocload-<unix ns>").
	RequestPrefix string
	// Return, when set, hands each allocated server back, in the
	// background (at most Returners at once, the others queued; a caller
	// never waits for a return): ReturnByReady.
	Return func(ctx context.Context, resp *tetherv1.AllocateGameServerResponse) error
	// Returners bounds the returns in flight; default DefaultReturners.
	Returners int
	// ReturnAfterCalls holds the returns until the callers are done, so
	// that the calls are measured alone: the game servers' ends of match,
	// their SDK calls and the events those write do not share the
	// machine with them. Without it, returns run while the callers call,
	// as matches end in a live fleet.
	ReturnAfterCalls bool
	// CallsDone, when set, is called once the callers are done, before
	// the run waits for the returns (a profile of the calls stops there).
	CallsDone func()
	// OnCall, when set, is called after each call with its latency and
	// error (from every caller at once).
	OnCall func(latency time.Duration, err error)
}

func (o *Options) setDefaults() {
	if o.Players <= 0 {
		o.Players = 2
	}
	if o.Callers <= 0 {
		o.Callers = DefaultCallers
	}
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	if o.RetryPause <= 0 {
		o.RetryPause = DefaultRetryPause
	}
	if o.CallWait <= 0 {
		o.CallWait = DefaultCallWait
	}
	if o.RequestPrefix == "" {
		o.RequestPrefix = fmt.Sprintf("allocload-%d", time.Now().UnixNano())
	}
	if o.Returners <= 0 {
		o.Returners = DefaultReturners
	}
}

// Result is what a run measured.
type Result struct {
	// Targets is how many replicas were called.
	Targets int
	// Callers is the number of concurrent callers.
	Callers int
	// Elapsed is the time from the first call to the last answer.
	Elapsed time.Duration
	// Allocations counts the calls answered OK.
	Allocations int
	// Latencies are the OK calls' latencies, sorted.
	Latencies []time.Duration
	// Errors counts the failed calls by gRPC code.
	Errors map[codes.Code]int
	// ErrorSamples are the first failed calls' errors, as the caller got them.
	ErrorSamples []string
	// Cut counts, in a run bounded by Max, the calls still unanswered
	// when the run's Duration ran out: calls that hung, since such a run
	// should end well before its Duration. (In a run bounded by Duration
	// alone, the calls in flight at its end are neither counted nor
	// errors.)
	Cut int
	// Returned and ReturnFailed count the servers handed back, and those
	// that could not be (their errors: ReturnErrors, the first few).
	Returned, ReturnFailed int
	// ReturnErrors holds the first return errors.
	ReturnErrors []string
}

// Rate is the OK allocations per second.
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Allocations) / r.Elapsed.Seconds()
}

// Quantile returns the q-quantile of the OK calls' latencies (0 if none).
func (r Result) Quantile(q float64) time.Duration { return quantile(r.Latencies, q) }

// quantile is the q-quantile of sorted (0 if empty).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// Max is the slowest OK call.
func (r Result) Max() time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	return r.Latencies[len(r.Latencies)-1]
}

// ErrorSummary spells the errors by code and the calls cut, "none" if
// none.
func (r Result) ErrorSummary() string {
	if len(r.Errors) == 0 && r.Cut == 0 {
		return "none"
	}
	var parts []string
	for c, n := range r.Errors {
		parts = append(parts, fmt.Sprintf("%s %d", c, n))
	}
	slices.Sort(parts)
	if r.Cut > 0 {
		parts = append(parts, fmt.Sprintf("%d unanswered at the end of the run", r.Cut))
	}
	return strings.Join(parts, ", ")
}

// Table writes the result as a table.
func (r Result) Table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) }
	fmt.Fprintln(tw, "replicas\tcallers\tallocations\tallocs/s\tp50 ms\tp90 ms\tp99 ms\tmax ms\terrors\treturned")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%d (%d failed)\n", r.Targets, r.Callers, r.Allocations, r.Rate(),
		ms(r.Quantile(0.5)), ms(r.Quantile(0.9)), ms(r.Quantile(0.99)), ms(r.Max()), r.ErrorSummary(), r.Returned, r.ReturnFailed)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, e := range r.ErrorSamples {
		if _, err := fmt.Fprintf(w, "  error: %s\n", e); err != nil {
			return err
		}
	}
	return nil
}

// Run calls until Duration has passed (or Max allocations are made, or ctx
// ends), then waits for the returns in flight, and reports.
func Run(ctx context.Context, opts Options) (Result, error) {
	opts.setDefaults()
	if len(opts.Targets) == 0 {
		return Result{}, errors.New("allocload: no targets")
	}
	if opts.Parent == "" {
		return Result{}, errors.New("allocload: no parent fleet")
	}
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			_ = c.Close() // the run is over; a close error changes nothing
		}
	}()
	for _, t := range opts.Targets {
		c, err := grpc.NewClient(t, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return Result{}, fmt.Errorf("allocload: dial %s: %w", t, err)
		}
		conns = append(conns, c)
	}
	if opts.Key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+opts.Key)
	}
	runCtx, cancel := context.WithTimeout(ctx, opts.Duration)
	defer cancel()
	// over reports whether the run has ended. A call's deadline is never
	// later than the run's, and its timer may fire first: a call failed
	// then, while runCtx.Err() is still nil, was cut by the end of the
	// run, not failed by the API (as were the calls made after it, each
	// with a deadline already past).
	end, _ := runCtx.Deadline()
	over := func() bool { return runCtx.Err() != nil || !time.Now().Before(end) }

	var (
		mu      sync.Mutex
		res     = Result{Targets: len(opts.Targets), Callers: opts.Callers, Errors: map[codes.Code]int{}}
		issued  atomic.Int64
		returns sync.WaitGroup
		slots   = make(chan struct{}, opts.Returners)
	)
	players := make([]*tetherv1.PlayerRequest, opts.Players)
	for i := range players {
		players[i] = &tetherv1.PlayerRequest{PlayerId: fmt.Sprintf("p%d", i)}
	}
	giveBack := func(resp *tetherv1.AllocateGameServerResponse) {
		// Returns outlive the calling phase (bounded by their own
		// deadline), not the caller's ctx.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer rcancel()
		err := opts.Return(rctx, resp)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			res.ReturnFailed++
			if len(res.ReturnErrors) < 5 {
				res.ReturnErrors = append(res.ReturnErrors, err.Error())
			}
			return
		}
		res.Returned++
	}
	returnsOpen := make(chan struct{}) // closed when returns may start
	if !opts.ReturnAfterCalls {
		close(returnsOpen)
	}
	start := time.Now()
	var callers sync.WaitGroup
	for i := range opts.Callers {
		api := tetherv1.NewAllocationServiceClient(conns[i%len(conns)])
		callers.Go(func() {
			for n := 0; !over(); n++ {
				if opts.Max > 0 && issued.Add(1) > int64(opts.Max) {
					return
				}
				cctx, ccancel := context.WithTimeout(runCtx, opts.CallWait)
				t0 := time.Now()
				resp, err := api.AllocateGameServer(cctx, &tetherv1.AllocateGameServerRequest{
					Parent: opts.Parent, RequestId: fmt.Sprintf("%s-%d-%d", opts.RequestPrefix, i, n),
					GameSession: &tetherv1.GameSessionRequest{Properties: map[string]string{"map": "dust"}},
					Players:     players,
				})
				d := time.Since(t0)
				ccancel()
				if c := status.Code(err); over() && (c == codes.DeadlineExceeded || c == codes.Canceled) {
					if opts.Max > 0 && ctx.Err() == nil { // the run's Duration, not the caller, ended it
						mu.Lock()
						res.Cut++
						mu.Unlock()
					}
					return // cut by the end of the run: not an answer
				}
				if opts.OnCall != nil {
					opts.OnCall(d, err)
				}
				mu.Lock()
				if err == nil {
					res.Allocations++
					res.Latencies = append(res.Latencies, d)
				} else {
					res.Errors[status.Code(err)]++
					if len(res.ErrorSamples) < 5 {
						res.ErrorSamples = append(res.ErrorSamples, err.Error())
					}
				}
				mu.Unlock()
				if err == nil && opts.Return != nil {
					// The caller goes on at once: a return waits for its
					// slot on its own. (Callers that waited for a slot were
					// held to 64 returns in flight, each at least one
					// 100 ms poll: about 640 calls/s, whatever the API did.)
					returns.Go(func() {
						<-returnsOpen
						slots <- struct{}{}
						defer func() { <-slots }()
						giveBack(resp)
					})
				}
				if status.Code(err) == codes.ResourceExhausted {
					pause := time.NewTimer(opts.RetryPause)
					select {
					case <-pause.C:
					case <-runCtx.Done():
						pause.Stop()
					}
				}
			}
		})
	}
	callers.Wait()
	res.Elapsed = time.Since(start)
	if opts.CallsDone != nil {
		opts.CallsDone()
	}
	if opts.ReturnAfterCalls {
		close(returnsOpen)
	}
	returns.Wait()
	slices.Sort(res.Latencies)
	return res, nil
}

// ReturnByReady hands an allocated example game server back to the pool as
// its game would at the end of a match: it asks the server on its game
// port (TCP) for its state until the server shows this allocation (the
// agent has told it), then says "READY", so the game calls the SDK's Ready:
// the game session ends (SERVER_READY_AGAIN) and the server is READY again.
// The port is the endpoint's port named portName (the first if empty).
func ReturnByReady(portName string, poll time.Duration) func(ctx context.Context, resp *tetherv1.AllocateGameServerResponse) error {
	return func(ctx context.Context, resp *tetherv1.AllocateGameServerResponse) error {
		ep := resp.GetEndpoint()
		var port int32
		for _, p := range ep.GetPorts() {
			if portName == "" || p.GetName() == portName {
				port = p.GetPort()
				break
			}
		}
		if port == 0 {
			return fmt.Errorf("allocload: %s has no port %q", resp.GetGameServer().GetName(), portName)
		}
		addr := net.JoinHostPort(ep.GetAddress(), strconv.Itoa(int(port)))
		want := "STATE ALLOCATED " + resp.GetGameSession().GetName()
		tick := time.NewTicker(poll)
		defer tick.Stop()
		for {
			line, err := Tell(ctx, addr, "STATE")
			if err == nil && strings.HasPrefix(line, want) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("allocload: %s never showed %s (last %q, %v): %w", addr, want, line, err, ctx.Err())
			case <-tick.C:
			}
		}
		line, err := Tell(ctx, addr, "READY")
		if err != nil {
			return err
		}
		if line != "OK" {
			return fmt.Errorf("allocload: READY to %s: %q", addr, line)
		}
		return nil
	}
}

// Tell sends one line to the example game server at addr over TCP and
// returns its one-line answer.
func Tell(ctx context.Context, addr, line string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return "", err
	}
	if _, err := fmt.Fprintln(conn, line); err != nil {
		return "", err
	}
	s := bufio.NewScanner(conn)
	if !s.Scan() {
		if s.Err() != nil {
			return "", s.Err()
		}
		return "", fmt.Errorf("allocload: no answer to %s from %s", line, addr)
	}
	return s.Text(), nil
}
