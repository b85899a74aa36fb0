package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/projections/postgres"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// Error reasons of the ProjectionService.
const (
	// ReasonPoisonEvent: a rebuild met an event it cannot apply.
	ReasonPoisonEvent = "POISON_EVENT"
	// ReasonStillPoison: a retried dead letter still cannot be applied.
	ReasonStillPoison = "STILL_POISON"
	// ReasonReplayRunning: another rebuild or check is running.
	ReasonReplayRunning = "REPLAY_RUNNING"
	// ReasonProjectionsUnavailable: this replica was started without a
	// database pool or JetStream handle for projection operations.
	ReasonProjectionsUnavailable = "PROJECTIONS_UNAVAILABLE"
)

// projectionService implements tetherv1.ProjectionServiceServer.
type projectionService struct {
	tetherv1.UnimplementedProjectionServiceServer
	s *Server
}

// replayOptions returns the options of a rebuild, check or retry, or an
// error when this replica cannot run them.
func (p *projectionService) replayOptions() (postgres.ReplayOptions, error) {
	o := p.s.opts
	if o.ProjectionPool == nil || o.JetStream == nil {
		return postgres.ReplayOptions{}, &apiError{code: codes.Unimplemented, reason: ReasonProjectionsUnavailable,
			msg: "this API server has no database pool or JetStream handle for projection operations"}
	}
	return postgres.ReplayOptions{Pool: o.ProjectionPool, JetStream: o.JetStream, Verifier: o.Verifier, Logger: p.s.log.With("component", "projections")}, nil
}

// projectionError decides the status of the projection operations' errors.
func projectionError(err error) error {
	if pe, ok := errors.AsType[*postgres.PoisonError](err); ok {
		return &apiError{code: codes.FailedPrecondition, reason: ReasonPoisonEvent,
			msg: fmt.Sprintf("rebuild stopped, the live views are unchanged: %v", pe)}
	}
	switch {
	case errors.Is(err, postgres.ErrStillPoison):
		return &apiError{code: codes.FailedPrecondition, reason: ReasonStillPoison, msg: err.Error()}
	case errors.Is(err, postgres.ErrReplayBusy):
		return &apiError{code: codes.Aborted, reason: ReasonReplayRunning, msg: err.Error()}
	}
	return err
}

// GetProjectionStatus implements tetherv1.ProjectionServiceServer.
func (p *projectionService) GetProjectionStatus(ctx context.Context, _ *tetherv1.GetProjectionStatusRequest) (*tetherv1.ProjectionStatus, error) {
	o, err := p.replayOptions()
	if err != nil {
		return nil, err
	}
	st, err := postgres.ReadStatus(ctx, o)
	if err != nil {
		return nil, err
	}
	out := &tetherv1.ProjectionStatus{Checkpoint: int64(st.Checkpoint), StreamLastSequence: int64(st.StreamLastSequence),
		Lag: int64(st.Lag), DeadLetters: st.DeadLetters}
	if !st.CheckpointTime.IsZero() {
		out.CheckpointTime = timestamppb.New(st.CheckpointTime)
	}
	return out, nil
}

// RebuildProjections implements tetherv1.ProjectionServiceServer.
func (p *projectionService) RebuildProjections(req *tetherv1.RebuildProjectionsRequest, stream grpc.ServerStreamingServer[tetherv1.RebuildProgress]) error {
	o, err := p.replayOptions()
	if err != nil {
		return err
	}
	if req.GetBatchSize() < 0 || req.GetBatchSize() > 100_000 {
		return invalidField("batch_size", "must be between 0 (default) and 100000")
	}
	o.BatchSize = int(req.GetBatchSize())
	var sendErr error
	o.Progress = func(pr postgres.RebuildProgress) {
		if sendErr == nil {
			sendErr = stream.Send(rebuildProgressPB(pr))
		}
	}
	// The rebuild goes on to its swap even if the client goes away: its
	// context is the server's, not the call's.
	ctx, cancel := context.WithCancel(context.WithoutCancel(stream.Context()))
	defer cancel()
	res, err := postgres.Rebuild(ctx, o)
	if err != nil {
		return projectionError(err)
	}
	p.s.log.Info("projections rebuilt", "checkpoint", res.Checkpoint, "duration", res.Duration, "events_per_second", int(res.Rate))
	if sendErr != nil {
		p.s.log.Warn("rebuild progress not delivered", "err", sendErr)
	}
	return nil
}

func rebuildProgressPB(pr postgres.RebuildProgress) *tetherv1.RebuildProgress {
	phase := map[postgres.RebuildPhase]tetherv1.RebuildProgress_Phase{
		postgres.PhasePrepare: tetherv1.RebuildProgress_PHASE_PREPARE,
		postgres.PhaseReplay:  tetherv1.RebuildProgress_PHASE_REPLAY,
		postgres.PhaseCatchUp: tetherv1.RebuildProgress_PHASE_CATCH_UP,
		postgres.PhaseSwap:    tetherv1.RebuildProgress_PHASE_SWAP,
		postgres.PhaseDone:    tetherv1.RebuildProgress_PHASE_DONE,
	}[pr.Phase]
	return &tetherv1.RebuildProgress{Phase: phase, Applied: int64(pr.Applied), Target: int64(pr.Target),
		EventsPerSecond: pr.Rate, Eta: durationpb.New(pr.ETA), Elapsed: durationpb.New(pr.Elapsed)}
}

// CheckProjections implements tetherv1.ProjectionServiceServer.
func (p *projectionService) CheckProjections(ctx context.Context, _ *tetherv1.CheckProjectionsRequest) (*tetherv1.CheckReport, error) {
	o, err := p.replayOptions()
	if err != nil {
		return nil, err
	}
	rep, err := postgres.Check(ctx, o)
	if err != nil {
		return nil, projectionError(err)
	}
	out := &tetherv1.CheckReport{Sequence: int64(rep.Sequence), Rows: rep.Rows, Truncated: rep.Truncated,
		Duration: durationpb.New(rep.Duration)}
	kinds := map[postgres.DiffKind]tetherv1.ProjectionDifference_Kind{
		postgres.DiffMissing:   tetherv1.ProjectionDifference_KIND_MISSING,
		postgres.DiffExtra:     tetherv1.ProjectionDifference_KIND_EXTRA,
		postgres.DiffDifferent: tetherv1.ProjectionDifference_KIND_DIFFERENT,
	}
	for _, d := range rep.Differences {
		out.Differences = append(out.Differences, &tetherv1.ProjectionDifference{Table: d.Table, Key: d.Key, Kind: kinds[d.Kind], Columns: d.Columns})
	}
	return out, nil
}

// deadLetterPage is the paging query of ListDeadLetters.
const deadLetterPage = "deadLetters"

// ListDeadLetters implements tetherv1.ProjectionServiceServer.
func (p *projectionService) ListDeadLetters(ctx context.Context, req *tetherv1.ListDeadLettersRequest) (*tetherv1.ListDeadLettersResponse, error) {
	o, err := p.replayOptions()
	if err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		return nil, invalidField("page_size", "must not be negative")
	case size == 0:
		size = 100
	case size > 1000:
		size = 1000
	}
	var after uint64
	if req.GetPageToken() != "" {
		a, err := decodePageToken(req.GetPageToken(), deadLetterPage)
		if err != nil {
			return nil, err
		}
		if after, err = strconv.ParseUint(a, 10, 64); err != nil {
			return nil, invalidField("page_token", "not a token of this list")
		}
	}
	list, err := postgres.NewViews(o.Pool).DeadLetters(ctx, after, size+1)
	if err != nil {
		return nil, err
	}
	out := &tetherv1.ListDeadLettersResponse{}
	if len(list) > size {
		list = list[:size]
		out.NextPageToken = encodePageToken(strconv.FormatUint(list[size-1].Sequence, 10), deadLetterPage)
	}
	for _, d := range list {
		out.DeadLetters = append(out.DeadLetters, &tetherv1.DeadLetter{Sequence: int64(d.Sequence), Subject: d.Subject,
			Type: d.Type, Error: d.Error, CreateTime: timestamppb.New(d.CreateTime)})
	}
	return out, nil
}

// RetryDeadLetter implements tetherv1.ProjectionServiceServer.
func (p *projectionService) RetryDeadLetter(ctx context.Context, req *tetherv1.RetryDeadLetterRequest) (*tetherv1.RetryDeadLetterResponse, error) {
	o, err := p.replayOptions()
	if err != nil {
		return nil, err
	}
	if req.GetSequence() <= 0 {
		return nil, invalidField("sequence", "must be a positive stream sequence")
	}
	res, err := postgres.RetryDeadLetter(ctx, o, uint64(req.GetSequence()))
	if err != nil {
		return nil, projectionError(err)
	}
	out := &tetherv1.RetryDeadLetterResponse{Aggregate: res.Aggregate, Sequence: int64(res.Sequence)}
	for _, s := range res.Resolved {
		out.Resolved = append(out.Resolved, int64(s))
	}
	return out, nil
}
