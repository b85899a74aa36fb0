package apiserver

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	protov2 "google.golang.org/protobuf/proto"
)

// A request that does not decode (a truncated message, a wire type no
// field has, a string that is not UTF-8) is the caller's error, and is
// refused INVALID_ARGUMENT; grpc's server answers INTERNAL to any error of
// its codec, before the interceptors run. So the server's codec keeps the
// error with the message instead of returning it, and the interceptors
// refuse the message after the caller's permission is checked: a role that
// may not call the method is told so (PERMISSION_DENIED), whatever it sent.

// requestCodec is the gRPC server's codec: proto's, which keeps the
// messages it could not unmarshal in undecoded.
type requestCodec struct {
	encoding.CodecV2
	undecoded *undecodedRequests
}

// newRequestCodec wraps grpc's proto codec.
func newRequestCodec(u *undecodedRequests) requestCodec {
	return requestCodec{CodecV2: encoding.GetCodecV2(proto.Name), undecoded: u}
}

// Unmarshal decodes data into v; a failure is kept for the interceptors
// (undecodedRequests.take) instead of being returned.
func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if err := c.CodecV2.Unmarshal(data, v); err != nil {
		c.undecoded.put(v, err)
	}
	return nil
}

// undecodedRequests are the messages the codec could not unmarshal, by
// their pointer, each with its error, until an interceptor takes it.
type undecodedRequests struct{ m sync.Map }

func (u *undecodedRequests) put(v any, err error) { u.m.Store(v, err) }

// take returns the refusal of a message the codec could not unmarshal, or
// nil, and forgets it.
func (u *undecodedRequests) take(v any) error {
	err, ok := u.m.LoadAndDelete(v)
	if !ok {
		return nil
	}
	name := fmt.Sprintf("%T", v)
	if m, isProto := v.(protov2.Message); isProto {
		name = string(m.ProtoReflect().Descriptor().FullName())
	}
	return invalidField(name, fmt.Sprintf("the request does not decode as a %s: %v", name, err))
}

// undecodedKey is the context key of a unary request's refusal by take.
type undecodedKey struct{}

// unaryUndecoded is the first unary interceptor: it takes the request's
// decoding error, if any, into the call's context, where unaryRequests
// refuses it after the permission check (so that every message kept is
// taken, whichever interceptor refuses the call).
func (u *undecodedRequests) unaryUndecoded() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := u.take(req); err != nil {
			ctx = context.WithValue(ctx, undecodedKey{}, err)
		}
		return handler(ctx, req)
	}
}

// undecodedRequest returns the refusal unaryUndecoded kept, or nil.
func undecodedRequest(ctx context.Context) error {
	err, _ := ctx.Value(undecodedKey{}).(error)
	return err
}
