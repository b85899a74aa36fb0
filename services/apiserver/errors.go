package apiserver

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tetherhq/tether/events"
	"github.com/tetherhq/tether/events/natsjs/jsclient"
	"github.com/tetherhq/tether/projections"
)

// ErrorDomain is the ErrorInfo domain of every Tether API error.
const ErrorDomain = "tether.dev"

// Error reasons (google.rpc.ErrorInfo.reason) the API returns.
const (
	ReasonInvalidArgument   = "INVALID_ARGUMENT"
	ReasonNotFound          = "NOT_FOUND"
	ReasonAlreadyExists     = "ALREADY_EXISTS"
	ReasonVersionConflict   = "VERSION_CONFLICT"
	ReasonInvalidTransition = "INVALID_TRANSITION"
	ReasonProjectionBehind  = "PROJECTION_BEHIND"
	ReasonUnavailable       = "UNAVAILABLE"
	ReasonInternal          = "INTERNAL"
)

// apiError is an error with its gRPC code and ErrorInfo reason decided.
type apiError struct {
	code   codes.Code
	reason string
	field  string // request field for a BadRequest violation, if any
	msg    string
	meta   map[string]string // the ErrorInfo's metadata, if any
	// retry, when set, is how soon a retry may succeed: a RetryInfo (and
	// over REST a Retry-After header).
	retry time.Duration
}

func (e *apiError) Error() string { return e.msg }

func invalidField(field, msg string) error {
	return &apiError{code: codes.InvalidArgument, reason: ReasonInvalidArgument, field: field, msg: field + ": " + msg}
}

// toStatus converts any error a handler returns into a gRPC status with an
// ErrorInfo (and a BadRequest for field errors). It is the only place where
// errors become statuses.
func toStatus(log *slog.Logger, method string, err error) *status.Status {
	ae, st := classify(log, method, err)
	if st != nil {
		return st
	}
	st = status.New(ae.code, ae.msg)
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: ae.reason, Domain: ErrorDomain, Metadata: ae.meta}}
	if ae.field != "" {
		details = append(details, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: ae.field, Description: ae.msg},
		}})
	}
	if ae.retry > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(ae.retry)})
	}
	withDetails, err := st.WithDetails(details...)
	if err != nil {
		// Only possible for codes.OK, which never reaches here.
		log.Error("attach error details", "method", method, "err", err)
		return st
	}
	return withDetails
}

// classify turns err into the API error the caller receives (code,
// reason, message), logging the kinds an operator must see; an error that
// is a gRPC status already is returned as that status instead.
func classify(log *slog.Logger, method string, err error) (*apiError, *status.Status) {
	var (
		ae *apiError
		ve *events.ValidationError
		te *events.TransitionError
		re *events.RefusedError
		ce *events.CounterError
	)
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &ve):
		ae = &apiError{code: codes.InvalidArgument, reason: ReasonInvalidArgument, field: ve.Field, msg: ve.Error()}
	case errors.Is(err, events.ErrInvalidName):
		ae = &apiError{code: codes.InvalidArgument, reason: ReasonInvalidArgument, msg: err.Error()}
	case errors.Is(err, projections.ErrNotFound):
		ae = &apiError{code: codes.NotFound, reason: ReasonNotFound, msg: err.Error()}
	case errors.Is(err, events.ErrConflict):
		ae = &apiError{code: codes.Aborted, reason: ReasonVersionConflict, msg: "the resource changed concurrently; read it again and retry"}
	case errors.As(err, &ce):
		// As Agones' SDK answers: a count or list out of its range, a value
		// the list holds already, a counter, list or value that is not there.
		code := codes.OutOfRange
		switch {
		case errors.Is(ce, events.ErrAlreadyExists):
			code = codes.AlreadyExists
		case errors.Is(ce, events.ErrMissing):
			code = codes.NotFound
		}
		ae = &apiError{code: code, reason: ce.Reason, field: ce.Field, msg: ce.Msg}
	case errors.As(err, &re):
		code := codes.FailedPrecondition
		if re.Reason == events.RefusedPlayerSessionUnknown || re.Reason == events.RefusedGameSessionUnknown {
			code = codes.NotFound
		}
		ae = &apiError{code: code, reason: re.Reason, msg: re.Msg}
	case errors.As(err, &te):
		ae = &apiError{code: codes.FailedPrecondition, reason: ReasonInvalidTransition, msg: te.Error()}
	case storeUnavailable(err):
		// Nothing was refused: a retry, on this replica or another, may
		// succeed (every call is idempotent through its request id).
		log.Warn("store unavailable", "method", method, "err", err)
		ae = &apiError{code: codes.Unavailable, reason: ReasonUnavailable, msg: "the event store or the views are unavailable for now; retry"}
	case errors.Is(err, context.Canceled):
		ae = &apiError{code: codes.Canceled, reason: "CANCELLED", msg: "request cancelled"}
	case errors.Is(err, context.DeadlineExceeded):
		// The caller's deadline: which step it ran out in says where the
		// time went (NATS or PostgreSQL slow or cut off).
		log.Warn("call ran out of its deadline", "method", method, "err", err)
		ae = &apiError{code: codes.DeadlineExceeded, reason: "DEADLINE_EXCEEDED", msg: "deadline exceeded"}
	default:
		if s, ok := status.FromError(err); ok {
			return nil, s // already a status, e.g. from grpc itself
		}
		log.Error("internal error", "method", method, "err", err)
		ae = &apiError{code: codes.Internal, reason: ReasonInternal, msg: "internal error"}
	}
	return ae, nil
}

// storeUnavailable reports whether err says the event store or the views
// could not be reached for now, rather than that they refused the call:
// an append that gave up waiting for NATS, a read JetStream could not
// answer (no stream leader, no answer: jsclient.Unavailable), or a
// PostgreSQL connection that failed or was ended by a server shutting down
// or restarting.
func storeUnavailable(err error) bool {
	if jsclient.Unavailable(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception; 57P01-57P03: admin or crash
		// shutdown, cannot connect now (starting up).
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	var connectErr *pgconn.ConnectError
	return errors.As(err, &connectErr) || pgconn.SafeToRetry(err)
}

// unaryErrors and streamErrors apply toStatus to every handler's error.
func unaryErrors(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err != nil {
			return nil, toStatus(log, info.FullMethod, err).Err()
		}
		return resp, nil
	}
}

func streamErrors(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := handler(srv, ss); err != nil {
			return toStatus(log, info.FullMethod, err).Err()
		}
		return nil
	}
}
