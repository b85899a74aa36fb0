package apiserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ReasonRequestIDReused is the ErrorInfo reason of a request whose request
// id was already used by a request with another content.
const ReasonRequestIDReused = "REQUEST_ID_REUSED"

// This file holds the checks every request gets before its handler, over
// gRPC and (through the gateway) REST alike: no field this server does not
// know, no enum number its enum does not declare. It also fingerprints
// requests that carry a request id, so that a retry can be told from a
// different request reusing the id.

// Size limits of a request.
const (
	// maxEventBytes is the event store's limit on one stored event: NATS's
	// default max_payload.
	maxEventBytes = 1 << 20
	// maxRequestBytes bounds a request's encoded size. What a request
	// carries (a fleet's spec, a player's data) is written into an event,
	// with an envelope around it: a larger request could only fail later,
	// as an internal error of the store.
	maxRequestBytes = maxEventBytes - 64<<10
)

// checkRequest returns an INVALID_ARGUMENT field error for a request too
// large to store, or for the first unknown field or undeclared enum value
// in it.
func checkRequest(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	if n := proto.Size(m); n > maxRequestBytes {
		return invalidField(largestField(m.ProtoReflect(), ""), fmt.Sprintf(
			"the request takes %d bytes; at most %d fit in an event of the event store (%d bytes with its envelope)", n, maxRequestBytes, maxEventBytes))
	}
	if err := checkMinSequence(m.ProtoReflect()); err != nil {
		return err
	}
	return checkMessage(m.ProtoReflect(), "")
}

// checkMinSequence refuses a negative min_sequence, which reads clamped to
// 0 (no wait) and so answered from views of any age.
func checkMinSequence(m protoreflect.Message) error {
	fd := m.Descriptor().Fields().ByName("min_sequence")
	if fd == nil || fd.Kind() != protoreflect.Int64Kind {
		return nil
	}
	if n := m.Get(fd).Int(); n < 0 {
		return invalidField("min_sequence", fmt.Sprintf("must not be negative, got %d", n))
	}
	return nil
}

// largestField returns the path of the field that takes most of a
// message's size, descending through singular message fields.
func largestField(m protoreflect.Message, path string) string {
	var best protoreflect.FieldDescriptor
	bestSize := -1
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		only := m.New()
		only.Set(fd, v)
		if n := proto.Size(only.Interface()); n > bestSize {
			best, bestSize = fd, n
		}
		return true
	})
	if best == nil {
		return orRequest(path)
	}
	path = joinPath(path, string(best.Name()))
	if best.Kind() == protoreflect.MessageKind && !best.IsList() && !best.IsMap() {
		return largestField(m.Get(best).Message(), path)
	}
	return path
}

// checkMessage walks a message: its unknown fields, then its set fields.
// path is the message's field path in the request ("" for the request).
func checkMessage(m protoreflect.Message, path string) error {
	if raw := m.GetUnknown(); len(raw) > 0 {
		num, _, _ := protowire.ConsumeField(raw)
		at := path
		if at == "" {
			at = string(m.Descriptor().FullName())
		}
		return invalidField(at, fmt.Sprintf("unknown field number %d: this server's %s has no such field (is the client built from a newer API?)",
			num, m.Descriptor().FullName()))
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		err = checkField(fd, v, joinPath(path, string(fd.Name())))
		return err == nil
	})
	return err
}

// checkField checks one set field: each element of a list, each value of
// a map, or the value itself.
func checkField(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) error {
	switch {
	case fd.IsList():
		l := v.List()
		for i := range l.Len() {
			if err := checkValue(fd, l.Get(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case fd.IsMap():
		var err error
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			err = checkValue(fd.MapValue(), mv, fmt.Sprintf("%s[%s]", path, k.String()))
			return err == nil
		})
		return err
	default:
		return checkValue(fd, v, path)
	}
	return nil
}

// checkValue checks a single value of an enum or message field.
func checkValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) error {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		return checkEnum(fd.Enum(), v.Enum(), path)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return checkMessage(v.Message(), path)
	}
	return nil
}

// checkEnum refuses an enum number its enum does not declare.
func checkEnum(ed protoreflect.EnumDescriptor, n protoreflect.EnumNumber, path string) error {
	if ed.Values().ByNumber(n) != nil {
		return nil
	}
	return invalidField(path, fmt.Sprintf("%d is not a value of %s; use one of %s", n, ed.Name(), enumValueNames(ed)))
}

// enumValueNames lists an enum's values but its zero (unspecified) one.
func enumValueNames(ed protoreflect.EnumDescriptor) string {
	var names []string
	for i := range ed.Values().Len() {
		if v := ed.Values().Get(i); v.Number() != 0 {
			names = append(names, string(v.Name()))
		}
	}
	return strings.Join(names, ", ")
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// fingerprintKey is the context key of a request's fingerprint.
type fingerprintKey struct{}

// requestFingerprint returns the fingerprint of the request being served,
// or "" when it carries no request id (or was not served through the
// interceptors, as in unit tests calling a handler directly).
func requestFingerprint(ctx context.Context) string {
	fp, _ := ctx.Value(fingerprintKey{}).(string)
	return fp
}

// notContent are the request fields a fingerprint leaves out: the request
// id itself, and min_sequence, a hint about how fresh the views must be
// that a retry may raise.
var notContent = []protoreflect.Name{"request_id", "min_sequence"}

// fingerprint returns the SHA-256 (hex) of a request's deterministic
// encoding without its request id, or "" for a request with no request id.
func fingerprint(req any) (string, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return "", nil
	}
	fd := m.ProtoReflect().Descriptor().Fields().ByName("request_id")
	if fd == nil || fd.Kind() != protoreflect.StringKind || m.ProtoReflect().Get(fd).String() == "" {
		return "", nil
	}
	c := proto.Clone(m)
	for _, name := range notContent {
		if f := c.ProtoReflect().Descriptor().Fields().ByName(name); f != nil {
			c.ProtoReflect().Clear(f)
		}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("fingerprint %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// checkFingerprint compares the fingerprint stored with a request id's
// first write with the request being served. An event stored without one
// (written before fingerprints existed) is taken as the same request.
func checkFingerprint(ctx context.Context, requestID, stored string) error {
	fp := requestFingerprint(ctx)
	if fp == "" || stored == "" || fp == stored {
		return nil
	}
	return &apiError{code: codes.InvalidArgument, reason: ReasonRequestIDReused, field: "request_id",
		msg: fmt.Sprintf("request_id: %q was already used by a request with a different content; a retry must repeat the request exactly, a new request needs a new request id", requestID)}
}

// unaryRequests checks each request and records its fingerprint in the
// context; it runs inside unaryErrors, so its errors become statuses there.
func unaryRequests() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := checkQueryHeader(ctx); err != nil {
			return nil, err
		}
		if err := checkRequest(req); err != nil {
			return nil, err
		}
		fp, err := fingerprint(req)
		if err != nil {
			return nil, err
		}
		if fp != "" {
			ctx = context.WithValue(ctx, fingerprintKey{}, fp)
		}
		return handler(ctx, req)
	}
}

// streamRequests checks the messages a streaming call receives.
func streamRequests() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := checkQueryHeader(ss.Context()); err != nil {
			return err
		}
		return handler(srv, checkedStream{ss})
	}
}

// checkedStream refuses received messages that checkRequest refuses.
type checkedStream struct{ grpc.ServerStream }

// RecvMsg receives a message and checks it.
func (s checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return checkRequest(m)
}
