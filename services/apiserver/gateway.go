package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/tetherhq/tether/services/platform/httpinput"
)

// This file sets up the REST gateway to refuse what it cannot map onto the
// request: unknown JSON fields, unknown enum names and unknown query
// parameters. The gateway's own refusals carry no details, so its error
// handler finds the offending field again and answers like the gRPC
// handlers do: INVALID_ARGUMENT with ErrorInfo and a BadRequest violation.

// maxKeptBody bounds the request body kept to locate a refusal in it.
const maxKeptBody = 8 << 20

// newGateway returns the REST gateway's mux, strict about its input.
func (s *Server) newGateway() *runtime.ServeMux {
	return runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{Marshaler: strictJSON{&runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}}}),
		runtime.WithMetadata(unknownQueryMetadata),
		runtime.WithMetadata(clientCertMetadata),
		runtime.WithErrorHandler(s.gatewayError),
		runtime.WithRoutingErrorHandler(routingError),
	)
}

// DefaultMaxBodyBytes is the default of Options.MaxBodyBytes.
const DefaultMaxBodyBytes = 1 << 20

// Reasons of requests the REST layer refuses before the gateway.
const (
	ReasonBodyTooLarge         = "BODY_TOO_LARGE"
	ReasonUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
	ReasonMethodNotAllowed     = "METHOD_NOT_ALLOWED"
	ReasonCrossOrigin          = "CROSS_ORIGIN"
)

// guardBody checks a REST request before anything else is done with it:
//   - a call that changes something, sent by a browser page of another
//     site (its Origin or Sec-Fetch-Site says so), is refused (403), keys
//     or not: a page cannot shut a match down, even with an empty body;
//   - with keys, a call without a valid key is refused (401) before its
//     body is read;
//   - a body over max bytes is refused (413), one that is not JSON
//     (415), and one that did not arrive within timeout, the server's read
//     timeout (408).
func guardBody(max int64, timeout time.Duration, auth *authenticator, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead && crossSite(r) {
			refuseHTTP(w, http.StatusForbidden, codes.PermissionDenied, ReasonCrossOrigin,
				"calls that change something are not taken from a browser page of another site")
			return
		}
		if part := httpinput.InvalidUTF8(r); part != "" {
			refuseHTTP(w, http.StatusBadRequest, codes.InvalidArgument, ReasonInvalidArgument, part+" is not valid UTF-8 (or not validly escaped)")
			return
		}
		// Only the gateway says which certificate a client showed.
		r.Header.Del("Grpc-Metadata-" + clientCertHeader)
		if auth != nil && !auth.restCheck(w, r) {
			return
		}
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > max {
			refuseHTTP(w, http.StatusRequestEntityTooLarge, codes.InvalidArgument, ReasonBodyTooLarge, fmt.Sprintf("the request body is %d bytes, more than the %d allowed", r.ContentLength, max))
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
		if err != nil {
			refuseBodyRead(w, timeout, err)
			return
		}
		if int64(len(body)) > max {
			refuseHTTP(w, http.StatusRequestEntityTooLarge, codes.InvalidArgument, ReasonBodyTooLarge, fmt.Sprintf("the request body is more than the %d bytes allowed", max))
			return
		}
		if len(body) > 0 {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				refuseHTTP(w, http.StatusUnsupportedMediaType, codes.InvalidArgument, ReasonUnsupportedMediaType,
					fmt.Sprintf("the request body must be JSON, sent with Content-Type: application/json (got %q)", r.Header.Get("Content-Type")))
				return
			}
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// ReasonRequestTimeout is the reason of a REST request whose body did not
// arrive within the server's read timeout.
const ReasonRequestTimeout = "REQUEST_TIMEOUT"

// refuseBodyRead answers a request whose body could not be read: 408 when
// it did not arrive within timeout, else 400 with the cause. Neither names
// the connection's addresses, which a read error of the socket carries
// ("read tcp 127.0.0.1:7080->…: i/o timeout").
func refuseBodyRead(w http.ResponseWriter, timeout time.Duration, err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		refuseHTTP(w, http.StatusRequestTimeout, codes.DeadlineExceeded, ReasonRequestTimeout,
			fmt.Sprintf("the request did not arrive whole within %s; send its body at once", timeout))
		return
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err // the cause, without the addresses
	}
	refuseHTTP(w, http.StatusBadRequest, codes.InvalidArgument, ReasonInvalidArgument, "reading the request body: "+err.Error())
}

// crossSite reports whether a browser sent r from a page of another site:
// its Sec-Fetch-Site says so, or its Origin names another host.
// Non-browser clients send neither.
func crossSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	return err != nil || u.Host != r.Host
}

// bearerOf returns the key an Authorization header value carries.
func bearerOf(v string) string {
	scheme, token, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// refuseHTTP answers with the API's error shape (a google.rpc.Status with
// an ErrorInfo) and the given HTTP status.
func refuseHTTP(w http.ResponseWriter, httpStatus int, code codes.Code, reason, msg string) {
	b, err := protojson.Marshal(reasonStatus(code, reason, msg).Proto())
	if err != nil { // a Status with an ErrorInfo always marshals
		b = []byte(`{"code":3,"message":"refused"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	_, _ = w.Write(b) // the client may be gone; nothing more to do
}

// routingError answers a path the API has but not for the request's
// method with 405 (the gateway's default says 501, "not implemented"), and
// an unknown path with 404, in the API's error shape.
func routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	switch httpStatus {
	case http.StatusMethodNotAllowed:
		refuseHTTP(w, http.StatusMethodNotAllowed, codes.Unimplemented, ReasonMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path)
	case http.StatusNotFound:
		refuseHTTP(w, http.StatusNotFound, codes.NotFound, ReasonNotFound, "no such path: "+r.URL.Path)
	default:
		runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, httpStatus)
	}
}

// bodyKey is the context key of a request's kept body.
type bodyKey struct{}

// keepBody records the request body as the gateway reads it, so that
// gatewayError can find a refused field in it.
func keepBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		kept := &capped{max: maxKeptBody}
		body := r.Body
		r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, kept))
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.TeeReader(body, kept), body}
		next.ServeHTTP(w, r)
	})
}

// capped is a buffer that keeps at most max bytes and then stops (and says
// so), never failing the writer.
type capped struct {
	bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if c.over || c.Len()+len(p) > c.max {
		c.over = true
		return len(p), nil
	}
	return c.Buffer.Write(p)
}

// gatewayError is the gateway's error handler: errors from the gRPC
// handlers pass as they are; the gateway's own INVALID_ARGUMENT (a body or
// query it could not decode) gets its field located and the details the
// API's errors carry.
//
// Every error leaves with an ErrorInfo reason (the gateway's own, such as a
// body it could not marshal, get the code's name), and one with a
// RetryInfo (a caller's limit) with a Retry-After header in seconds.
func (s *Server) gatewayError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	st := status.Convert(err)
	if st.Code() == codes.InvalidArgument && len(st.Details()) == 0 {
		// The gateway's own refusal, before the call reached the gRPC
		// handlers and their permission check: a role that may not call
		// the method is told that first, whatever its body.
		method, _ := runtime.RPCMethod(ctx)
		if denied := s.auth.restPermits(r, method); denied != nil {
			st = status.Convert(denied)
		} else {
			st = toStatus(s.log, method, locateRefusal(ctx, method, r, st.Message()))
		}
	}
	if !hasErrorInfo(st) {
		st = withErrorInfo(st, st.Code().String())
	}
	if d, ok := retryAfter(st); ok {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(d.Seconds())))))
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, st.Err())
}

// hasErrorInfo reports whether a status carries an ErrorInfo.
func hasErrorInfo(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.ErrorInfo); ok {
			return true
		}
	}
	return false
}

// withErrorInfo adds an ErrorInfo with reason to a status, keeping its
// other details.
func withErrorInfo(st *status.Status, reason string) *status.Status {
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: strings.ToUpper(toSnake(reason)), Domain: ErrorDomain}); err == nil {
		return d
	}
	return st
}

// toSnake turns a code name ("ResourceExhausted") into "Resource_Exhausted".
func toSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// locateRefusal finds which query parameter or body field the gateway
// refused, and returns it as a field error; without one it returns the
// gateway's message as an INVALID_ARGUMENT.
func locateRefusal(ctx context.Context, method string, r *http.Request, msg string) error {
	plain := &apiError{code: codes.InvalidArgument, reason: ReasonInvalidArgument, msg: strings.TrimSpace(strings.TrimPrefix(msg, "proto:"))}
	md, ok := methodDescriptor(method)
	if !ok {
		return plain
	}
	in := md.Input()
	if v := queryViolation(in, r.URL.Query()); v != nil {
		return v
	}
	kept, _ := ctx.Value(bodyKey{}).(*capped)
	if kept == nil {
		kept, _ = r.Context().Value(bodyKey{}).(*capped)
	}
	if kept == nil || kept.over {
		return plain
	}
	rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
	target, prefix := in, ""
	switch body := rule.GetBody(); body {
	case "":
		return plain
	case "*":
	default:
		fd := in.Fields().ByName(protoreflect.Name(body))
		if fd == nil || fd.Message() == nil {
			return plain
		}
		target, prefix = fd.Message(), body
	}
	doc, err := decodeBody(kept.Bytes())
	if err != nil {
		return invalidField(orRequest(prefix), err.Error())
	}
	if v := (jsonWalk{request: in.Name()}).violation(target, doc, prefix); v != nil {
		return v
	}
	return plain
}

func orRequest(path string) string {
	if path == "" {
		return "body"
	}
	return path
}

// methodDescriptor finds a method by its gRPC name ("/pkg.Service/Method").
func methodDescriptor(method string) (protoreflect.MethodDescriptor, bool) {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		return nil, false
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc + "." + name))
	if err != nil {
		return nil, false
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	return md, ok
}

// fieldByName finds a field by its JSON or proto name, as protojson and
// the gateway's query parser both accept.
func fieldByName(md protoreflect.MessageDescriptor, name string) protoreflect.FieldDescriptor {
	if fd := md.Fields().ByJSONName(name); fd != nil {
		return fd
	}
	return md.Fields().ByTextName(name)
}

// jsonWalk walks a decoded JSON body against the request it is decoded
// into, named request.
type jsonWalk struct{ request protoreflect.Name }

// in names the object at path for a message: the request's field by its
// path ("CreateGameServerRequest.spec.template"), or the request itself.
// The field's message type would mislead: a standalone game server's spec
// is a Fleet.
func (w jsonWalk) in(path string) string {
	if path == "" {
		return string(w.request)
	}
	return string(w.request) + "." + path
}

// violation walks a decoded JSON value against a message and returns
// the first field protojson refuses for a reason it can tell: an unknown
// field or an unknown enum value.
func (w jsonWalk) violation(md protoreflect.MessageDescriptor, doc any, path string) error {
	if strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return nil // well-known types have JSON forms of their own
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		if doc == nil {
			return nil
		}
		return invalidField(orRequest(path), fmt.Sprintf("must be a JSON object (%s is a %s)", w.in(path), md.Name()))
	}
	for key, v := range obj {
		fd := fieldByName(md, key)
		if fd == nil {
			return invalidField(joinPath(path, key), fmt.Sprintf("unknown field %q: %s has no such field", key, w.in(path)))
		}
		if err := w.field(fd, v, joinPath(path, string(fd.Name()))); err != nil {
			return err
		}
	}
	return nil
}

// field checks the JSON value of one field.
func (w jsonWalk) field(fd protoreflect.FieldDescriptor, v any, path string) error {
	switch {
	case v == nil:
		return nil
	case fd.IsList():
		list, ok := v.([]any)
		if !ok {
			return invalidField(path, "must be a JSON array")
		}
		for i, e := range list {
			if err := w.value(fd, e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case fd.IsMap():
		obj, ok := v.(map[string]any)
		if !ok {
			return invalidField(path, "must be a JSON object")
		}
		for k, e := range obj {
			if err := w.value(fd.MapValue(), e, fmt.Sprintf("%s[%s]", path, k)); err != nil {
				return err
			}
		}
	default:
		return w.value(fd, v, path)
	}
	return nil
}

// value checks one enum, message or scalar value.
func (w jsonWalk) value(fd protoreflect.FieldDescriptor, v any, path string) error {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		ed := fd.Enum()
		if ed.FullName() == "google.protobuf.NullValue" {
			return nil
		}
		if name, ok := v.(string); ok && ed.Values().ByName(protoreflect.Name(name)) == nil {
			return invalidField(path, fmt.Sprintf("%q is not a value of %s; use one of %s", name, ed.Name(), enumValueNames(ed)))
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return w.violation(fd.Message(), v, path)
	default:
		if want := jsonScalarProblem(fd.Kind(), v); want != "" {
			return invalidField(path, fmt.Sprintf("must be %s", want))
		}
	}
	return nil
}

// jsonScalarProblem says what a scalar field's JSON value should have
// been, or "" when protojson can take it.
func jsonScalarProblem(kind protoreflect.Kind, v any) string {
	switch kind {
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			return "true or false"
		}
	case protoreflect.StringKind, protoreflect.BytesKind:
		if _, ok := v.(string); !ok {
			return "a string"
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return intProblem(v, 32, true)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return intProblem(v, 64, true)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return intProblem(v, 32, false)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return intProblem(v, 64, false)
	}
	return ""
}

// intProblem checks an integer given as a JSON number or string.
func intProblem(v any, bits int, signed bool) string {
	var text string
	switch n := v.(type) {
	case json.Number:
		text = n.String()
	case string:
		text = n
	default:
		return "an integer"
	}
	var err error
	if signed {
		_, err = strconv.ParseInt(text, 10, bits)
	} else {
		_, err = strconv.ParseUint(text, 10, bits)
	}
	if err != nil {
		kind := "an integer"
		if !signed {
			kind = "a non-negative integer"
		}
		return fmt.Sprintf("%s in decimal digits (no exponent, no fraction) that fits in %d bits, got %s", kind, bits, text)
	}
	return ""
}

// mapKeyParam matches a query key addressing a map entry, "labels[k]".
var mapKeyParam = regexp.MustCompile(`^(.*)\[(.*)\]$`)

// queryViolation returns a field error for the first query parameter that
// names no field of the request or whose value the field cannot take.
func queryViolation(md protoreflect.MessageDescriptor, values url.Values) error {
	if key := unknownQueryParameter(md, values); key != "" {
		return invalidField(key, fmt.Sprintf("unknown query parameter %q: %s has no such field", key, md.Name()))
	}
	for _, key := range slices.Sorted(maps.Keys(values)) {
		msg := dynamicpb.NewMessage(md)
		if err := runtime.PopulateQueryParameters(msg, url.Values{key: values[key]}, utilities.NewDoubleArray(nil)); err != nil {
			return invalidField(key, fmt.Sprintf("query parameter %q: %v", key, err))
		}
	}
	return nil
}

// unknownQueryParameter returns the first query parameter, in key order,
// that names no field of the request, or "".
func unknownQueryParameter(md protoreflect.MessageDescriptor, values url.Values) string {
	for _, key := range slices.Sorted(maps.Keys(values)) {
		field := key
		if m := mapKeyParam.FindStringSubmatch(key); m != nil {
			field = m[1]
		}
		if !queryFieldExists(md, strings.Split(field, ".")) {
			return key
		}
	}
	return ""
}

// queryFieldExists reports whether a dotted path names a field.
func queryFieldExists(md protoreflect.MessageDescriptor, path []string) bool {
	for i, name := range path {
		fd := fieldByName(md, name)
		if fd == nil {
			return false
		}
		if i < len(path)-1 {
			if fd.Message() == nil || fd.IsList() || fd.IsMap() {
				return false
			}
			md = fd.Message()
		}
	}
	return true
}

// unknownQueryHeader carries, from the gateway to the gRPC handlers, a
// query parameter that names no field of the request, or one the body
// carries (the gateway's query parser ignores those, so a typo such as
// ?fleetID= would pass unseen, and its parser can only be replaced
// process-wide).
const unknownQueryHeader = "x-tether-unknown-query-parameter"

// unknownQueryMetadata is the gateway's metadata annotator: it names the
// first unknown query parameter, which unaryRequests then refuses.
func unknownQueryMetadata(ctx context.Context, r *http.Request) metadata.MD {
	method, _ := runtime.RPCMethod(ctx)
	md, ok := methodDescriptor(method)
	if !ok {
		return nil
	}
	values := r.URL.Query()
	if key := unknownQueryParameter(md.Input(), values); key != "" {
		return metadata.Pairs(unknownQueryHeader, key)
	}
	if key := bodyQueryParameter(md, values); key != "" {
		return metadata.Pairs(unknownQueryHeader, key)
	}
	return nil
}

// bodyQueryParameter returns the first query parameter that names a field
// the body carries (the gateway ignores those), or "".
func bodyQueryParameter(md protoreflect.MethodDescriptor, values url.Values) string {
	rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
	body := rule.GetBody()
	if body == "" {
		return ""
	}
	for _, key := range slices.Sorted(maps.Keys(values)) {
		first, _, _ := strings.Cut(key, ".")
		first, _, _ = strings.Cut(first, "[")
		if fd := fieldByName(md.Input(), first); body == "*" || fd != nil && string(fd.Name()) == body {
			return key
		}
	}
	return ""
}

// checkQueryHeader refuses a request the gateway marked with an unknown
// query parameter.
func checkQueryHeader(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if keys := md.Get(unknownQueryHeader); len(keys) > 0 {
		return invalidField(keys[0], fmt.Sprintf("unknown query parameter %q: no field of the request is taken from it (a typo, or a field the body carries?)", keys[0]))
	}
	return nil
}
