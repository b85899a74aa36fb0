package main

import (
	"fmt"
	"strings"
	"unicode"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// callError is a failed API call: the server's google.rpc.Status, or the
// client's when the server was not reached, with what the call was about.
// Its message is meant for people: "fleets/x not found (NOT_FOUND)".
type callError struct {
	// resource is the name the call was about; empty for lists.
	resource string
	// addr is the server address, for errors of the connection itself.
	addr string
	st   *status.Status
}

// apiError turns an error returned by a generated client into a callError
// about resource; errors that are not gRPC statuses are wrapped as they are.
func (c *client) apiError(resource string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		if resource == "" {
			return fmt.Errorf("call %s: %w", c.addr, err)
		}
		return fmt.Errorf("%s: %w", resource, err)
	}
	return &callError{resource: resource, addr: c.addr, st: st}
}

// Unwrap returns the gRPC status error, for errors.Is/As and status.FromError.
func (e *callError) Unwrap() error { return e.st.Err() }

// GRPCStatus lets status.FromError and status.Code see the status.
func (e *callError) GRPCStatus() *status.Status { return e.st }

// Reason returns the ErrorInfo reason, e.g. "VERSION_CONFLICT", or the
// status code spelled the same way when the server sent none.
func (e *callError) Reason() string {
	for _, d := range e.st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() != "" {
			return info.GetReason()
		}
	}
	return codeName(e.st.Code())
}

// Fields returns the request fields of BadRequest violations.
func (e *callError) Fields() []string {
	var fields []string
	for _, v := range e.violations() {
		fields = append(fields, v.GetField())
	}
	return fields
}

func (e *callError) violations() []*errdetails.BadRequest_FieldViolation {
	var out []*errdetails.BadRequest_FieldViolation
	for _, d := range e.st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			out = append(out, br.GetFieldViolations()...)
		}
	}
	return out
}

// archiveSegmentMetadata is the ErrorInfo metadata key in which the API
// names the archive segment of an archived resource
// (apiserver.ArchiveSegmentMetadata).
const archiveSegmentMetadata = "archiveSegment"

// metadata returns a value of the ErrorInfo's metadata, "" if none.
func (e *callError) metadata(key string) string {
	for _, d := range e.st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetMetadata()[key]
		}
	}
	return ""
}

func (e *callError) serverReason() bool {
	for _, d := range e.st.Details() {
		if _, ok := d.(*errdetails.ErrorInfo); ok {
			return true
		}
	}
	return false
}

// Error renders the status as "MESSAGE (REASON[, field F])", followed by
// field violations whose description adds to the message.
func (e *callError) Error() string {
	msg := e.st.Message()
	code := e.st.Code()
	switch {
	case code == codes.NotFound && e.resource != "" && e.metadata(archiveSegmentMetadata) == "":
		// The server's wording varies by resource; the CLI knows the name.
		// An archived resource's says where its history went.
		msg = e.resource + " not found"
	case code == codes.Unavailable && !e.serverReason():
		msg = fmt.Sprintf("cannot reach the API server at %s: %s", e.addr, msg)
	case code == codes.DeadlineExceeded && !e.serverReason():
		msg = fmt.Sprintf("no answer from the API server at %s in time (see --timeout)", e.addr)
	}
	var b strings.Builder
	b.WriteString(msg)
	b.WriteString(" (")
	b.WriteString(e.Reason())
	if fields := e.Fields(); len(fields) > 0 {
		label := "field"
		if len(fields) > 1 {
			label = "fields"
		}
		fmt.Fprintf(&b, ", %s %s", label, strings.Join(fields, ", "))
	}
	b.WriteString(")")
	for _, v := range e.violations() {
		if d := v.GetDescription(); d != "" && d != e.st.Message() {
			fmt.Fprintf(&b, "\n  %s: %s", v.GetField(), d)
		}
	}
	return b.String()
}

// codeName spells a gRPC code like the API's reasons: NotFound → NOT_FOUND.
func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}
