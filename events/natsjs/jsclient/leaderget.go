package jsclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jsNoMessageFound is JetStream's error code 10037, "no message found".
const jsNoMessageFound = 10037

// MsgRequest asks a stream's leader for one message: the first of subject
// NextFor at or after Seq (NextFor may be a wildcard), or the last of
// subject LastFor.
type MsgRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
}

// LeaderMessage is a message as a stream's leader returned it.
type LeaderMessage struct {
	Sequence uint64
	Subject  string
	Time     time.Time // when the stream stored it
	Header   nats.Header
	Data     []byte
}

// LeaderGet reads one message of stream from the stream's leader
// (found=false when there is none). Stream.GetMsg uses a direct get when
// the stream allows them, and any replica answers a direct get: one that
// is catching up answers once it is 90 % there, and one cut off from the
// others answers from its past. A caller that decides on absence (no
// message after this one, so nothing is left to wait for) reads with
// LeaderGet.
//
// Only the leader answers, so while the stream has none (an election,
// 4-9 s) LeaderGet asks again, as an append waits (PublishWaiting), for
// up to DefaultUnavailableWait within ctx; each request is bounded, since
// one the server drops is never answered, even without a deadline in ctx.
func LeaderGet(ctx context.Context, nc *nats.Conn, stream string, r MsgRequest) (LeaderMessage, bool, error) {
	return LeaderGetWaiting(ctx, nc, stream, r, DefaultUnavailableWait)
}

// LeaderGetWaiting is LeaderGet, waiting up to wait (one request if
// negative) for a leader instead of DefaultUnavailableWait: for a caller
// with a wait of its own (the event store, its Options.UnavailableWait).
func LeaderGetWaiting(ctx context.Context, nc *nats.Conn, stream string, r MsgRequest, wait time.Duration) (LeaderMessage, bool, error) {
	req, err := json.Marshal(r)
	if err != nil {
		return LeaderMessage{}, false, err
	}
	var m LeaderMessage
	var found bool
	err = waitAvailable(ctx, wait, func(ctx context.Context) error {
		var err error
		m, found, err = leaderGetOnce(ctx, nc, stream, req)
		return err
	})
	return m, found, err
}

// leaderGetOnce sends one request of LeaderGet.
func leaderGetOnce(ctx context.Context, nc *nats.Conn, stream string, req []byte) (LeaderMessage, bool, error) {
	reply, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return LeaderMessage{}, false, err
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return LeaderMessage{}, false, fmt.Errorf("decode the stream's answer: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == jsNoMessageFound:
		return LeaderMessage{}, false, nil
	case resp.Error != nil:
		return LeaderMessage{}, false, &jetstream.APIError{Code: resp.Error.Code, ErrorCode: jetstream.ErrorCode(resp.Error.ErrCode), Description: resp.Error.Description}
	case resp.Message == nil:
		return LeaderMessage{}, false, errors.New("the stream answered without a message")
	}
	m := LeaderMessage{Sequence: resp.Message.Sequence, Subject: resp.Message.Subject, Time: resp.Message.Time, Data: resp.Message.Data}
	if len(resp.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return LeaderMessage{}, false, fmt.Errorf("decode headers of message %d: %w", m.Sequence, err)
		}
	}
	return m, true, nil
}
