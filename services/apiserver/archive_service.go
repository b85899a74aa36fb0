package apiserver

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tetherhq/tether/events/archive"
	"github.com/tetherhq/tether/projections/postgres"
	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
)

// Error reasons of the ArchiveService.
const (
	// ReasonArchiveUnavailable: this API server has no archive catalog
	// (its views are not PostgreSQL's).
	ReasonArchiveUnavailable = "ARCHIVE_UNAVAILABLE"
	// ReasonSegmentNotStored: the segment to verify is INTENT: the
	// archiver has not written it yet.
	ReasonSegmentNotStored = "SEGMENT_NOT_STORED"
)

// archiveService implements tetherv1.ArchiveServiceServer.
type archiveService struct {
	tetherv1.UnimplementedArchiveServiceServer
	s *Server
}

// catalog returns the archive catalog, or the error of a server without
// one.
func (a *archiveService) catalog() (archiveCatalog, error) {
	if c := a.s.archive.catalog; c != nil {
		return c, nil
	}
	return nil, &apiError{code: codes.Unimplemented, reason: ReasonArchiveUnavailable, msg: "this API server has no archive catalog"}
}

// segmentStates maps the catalog's states to the API's.
var segmentStates = map[string]tetherv1.ArchiveSegment_State{
	"INTENT": tetherv1.ArchiveSegment_INTENT,
	"STORED": tetherv1.ArchiveSegment_STORED,
	"PURGED": tetherv1.ArchiveSegment_PURGED,
	"DONE":   tetherv1.ArchiveSegment_DONE,
}

// segmentToAPI converts a catalog segment for the API.
func segmentToAPI(s postgres.ArchiveSegment) *tetherv1.ArchiveSegment {
	return &tetherv1.ArchiveSegment{Name: s.Name, State: segmentStates[s.State], Aggregates: int32(s.Aggregates), Events: s.Events,
		Bytes: s.Bytes, Sha256: hex.EncodeToString(s.SHA256), CreateTime: timestamppb.New(s.CreateTime), UpdateTime: timestamppb.New(s.UpdateTime)}
}

// GetArchiveStatus implements tetherv1.ArchiveServiceServer.
func (a *archiveService) GetArchiveStatus(ctx context.Context, _ *tetherv1.GetArchiveStatusRequest) (*tetherv1.ArchiveStatus, error) {
	c, err := a.catalog()
	if err != nil {
		return nil, err
	}
	st, err := c.ArchiveStatus(ctx)
	if err != nil {
		return nil, err
	}
	out := &tetherv1.ArchiveStatus{
		SegmentsReadable: a.s.archive.store != nil,
		Segments: &tetherv1.ArchiveSegmentCounts{Intent: st.Segments["INTENT"], Stored: st.Segments["STORED"],
			Purged: st.Segments["PURGED"], Done: st.Segments["DONE"]},
		Aggregates: st.Aggregates, Events: st.Events, Bytes: st.Bytes, LastPassError: st.LastPassError,
	}
	if !st.OldestEnd.IsZero() {
		out.OldestEndTime, out.NewestEndTime = timestamppb.New(st.OldestEnd), timestamppb.New(st.NewestEnd)
	}
	if !st.LastPass.IsZero() {
		out.LastPassTime, out.Retention = timestamppb.New(st.LastPass), durationpb.New(st.Retention)
	}
	for _, s := range st.Unfinished {
		out.UnfinishedSegments = append(out.UnfinishedSegments, segmentToAPI(s))
	}
	return out, nil
}

// VerifyArchive implements tetherv1.ArchiveServiceServer.
func (a *archiveService) VerifyArchive(ctx context.Context, req *tetherv1.VerifyArchiveRequest) (*tetherv1.VerifyArchiveResponse, error) {
	c, err := a.catalog()
	if err != nil {
		return nil, err
	}
	if name := req.GetSegment(); name != "" {
		if err := archive.CheckName(name); err != nil {
			return nil, invalidField("segment", err.Error())
		}
	}
	store := a.s.archive.store
	if store == nil {
		return nil, &apiError{code: codes.FailedPrecondition, reason: ReasonArchiveNotRead,
			msg: "this API server does not read the archive: start it with --archive-dir (the controller's archive directory)"}
	}
	segs, err := c.ArchiveSegments(ctx, req.GetSegment())
	if err != nil {
		return nil, err
	}
	if name := req.GetSegment(); name != "" {
		switch {
		case len(segs) == 0:
			return nil, &apiError{code: codes.NotFound, reason: ReasonNotFound, msg: fmt.Sprintf("the archive catalog records no segment %s", name)}
		case segs[0].State == "INTENT":
			return nil, &apiError{code: codes.FailedPrecondition, reason: ReasonSegmentNotStored,
				msg: fmt.Sprintf("segment %s is INTENT: the archiver has not stored it yet", name)}
		}
	}
	out := &tetherv1.VerifyArchiveResponse{}
	for _, seg := range segs {
		if seg.State == "INTENT" {
			continue // not written yet
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		stretches, err := c.SegmentStretches(ctx, seg.Name)
		if err != nil {
			return nil, err
		}
		problems := verifySegment(ctx, store, seg, stretches)
		v := &tetherv1.SegmentVerification{Segment: segmentToAPI(seg), Ok: len(problems) == 0, Problems: problems}
		if !v.Ok {
			out.Failed++
			a.s.log.Warn("archive segment failed verification", "segment", seg.Name, "problems", problems)
		}
		out.Segments = append(out.Segments, v)
	}
	return out, nil
}

// verifySegment reads a stored segment back and checks it against what
// the catalog records: every block and its SHA-256 (archive.Reader.Verify),
// the sum, size and event count recorded, and its index against the
// recorded stretches. It returns what failed.
func verifySegment(ctx context.Context, store archive.SegmentStore, seg postgres.ArchiveSegment, stretches []postgres.ArchivedStretch) []string {
	r, err := archive.OpenSegment(ctx, store, seg.Name)
	if errors.Is(err, archive.ErrNotFound) {
		return []string{"missing from the segment store"}
	}
	if err != nil {
		return []string{err.Error()}
	}
	defer func() { _ = r.Close() }() // read only
	var problems []string
	if err := r.Verify(); err != nil {
		problems = append(problems, err.Error())
	}
	if sum := r.Sum(); !bytes.Equal(sum[:], seg.SHA256) {
		problems = append(problems, fmt.Sprintf("SHA-256 %x, the catalog records %x", sum, seg.SHA256))
	}
	if r.Size() != seg.Bytes {
		problems = append(problems, fmt.Sprintf("%d bytes, the catalog records %d", r.Size(), seg.Bytes))
	}
	if int64(r.Events()) != seg.Events {
		problems = append(problems, fmt.Sprintf("%d events, the catalog records %d", r.Events(), seg.Events))
	}
	index := r.Aggregates()
	if len(index) != len(stretches) || len(stretches) != seg.Aggregates {
		problems = append(problems, fmt.Sprintf("%d aggregates in its index, the catalog records %d (and %d rows)", len(index), seg.Aggregates, len(stretches)))
	}
	for i := range min(len(index), len(stretches)) {
		in, st := index[i], stretches[i]
		if in.Subject != st.Subject || in.FirstSequence != st.FirstSequence || in.LastSequence != st.LastSequence || int64(in.Events) != st.Events {
			problems = append(problems, fmt.Sprintf("aggregate %d is %s, sequences %d to %d, %d events; the catalog records %s, %d to %d, %d events",
				i, in.Subject, in.FirstSequence, in.LastSequence, in.Events, st.Subject, st.FirstSequence, st.LastSequence, st.Events))
		}
	}
	return problems
}
