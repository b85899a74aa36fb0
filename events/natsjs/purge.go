package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/events"
)

// Why the events stream allows purges (DenyPurge is off, DenyDelete on):
// an ended aggregate's history leaves the stream once it is archived
// (services/archiver, docs/architecture.md "The archive"), and a purge by
// subject is how it leaves, whole, in one request. Only the archiver
// purges, and only a subject whose events, up to the last sequence it
// purges, are in a segment that is durably stored, verified and recorded
// in the archive catalog; the purge is bounded by that sequence, so an
// event appended after the archiver read the subject stays in the stream.
// NATS permissions give the purge API to no other component (natsauth).

// PurgeSubject removes the events on subject (no wildcards) whose stream
// sequences are upTo or lower, and returns how many it removed. Events
// after upTo stay, so a caller that archived a subject's history up to
// upTo never removes an event it has not archived, whatever was appended
// meanwhile. It is idempotent: purging again removes nothing more.
//
// The stream's sequences do not move: the next event still takes the
// stream's next sequence, and the subject's last sequence, which guards
// appends, is that of its last event left (0 once it has none).
func (s *Store) PurgeSubject(ctx context.Context, subject string, upTo uint64) (uint64, error) {
	if err := checkSubject(subject); err != nil {
		return 0, err
	}
	if upTo == 0 || upTo == events.AnySequence {
		return 0, fmt.Errorf("natsjs: purge %s: no sequence to purge up to", subject)
	}
	// JetStream purges the filter's messages below seq: up to upTo, inclusive.
	req, err := json.Marshal(struct {
		Filter   string `json:"filter"`
		Sequence uint64 `json:"seq"`
	}{subject, upTo + 1})
	if err != nil {
		return 0, err
	}
	reply, err := s.js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+events.StreamName, req)
	if err != nil {
		return 0, fmt.Errorf("natsjs: purge %s up to %d: %w", subject, upTo, err)
	}
	var resp struct {
		Success bool   `json:"success"`
		Purged  uint64 `json:"purged"`
		Error   *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return 0, fmt.Errorf("natsjs: purge %s: decode the stream's answer: %w", subject, err)
	}
	switch {
	case resp.Error != nil:
		return 0, fmt.Errorf("natsjs: purge %s up to %d: %w", subject, upTo,
			&jetstream.APIError{Code: resp.Error.Code, ErrorCode: jetstream.ErrorCode(resp.Error.ErrCode), Description: resp.Error.Description})
	case !resp.Success:
		return 0, fmt.Errorf("natsjs: purge %s up to %d: %w", subject, upTo, errors.New("the stream did not confirm the purge"))
	}
	return resp.Purged, nil
}
