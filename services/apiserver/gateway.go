package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
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
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{Marshaler: &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}}),
		runtime.SetQueryParameterParser(strictQuery{}),
		runtime.WithErrorHandler(s.gatewayError),
	)
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
func (s *Server) gatewayError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument && len(st.Details()) == 0 {
		method, _ := runtime.RPCMethod(ctx)
		err = toStatus(s.log, method, locateRefusal(ctx, method, r, st.Message())).Err()
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
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
	var doc any
	dec := json.NewDecoder(bytes.NewReader(kept.Bytes()))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return invalidField(orRequest(prefix), fmt.Sprintf("the body is not valid JSON: %v", err))
	}
	if v := jsonViolation(target, doc, prefix); v != nil {
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

// jsonViolation walks a decoded JSON value against a message and returns
// the first field protojson refuses for a reason it can tell: an unknown
// field or an unknown enum value.
func jsonViolation(md protoreflect.MessageDescriptor, doc any, path string) error {
	if strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return nil // well-known types have JSON forms of their own
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		if doc == nil {
			return nil
		}
		return invalidField(orRequest(path), fmt.Sprintf("must be a JSON object (a %s)", md.Name()))
	}
	for key, v := range obj {
		fd := fieldByName(md, key)
		if fd == nil {
			return invalidField(joinPath(path, key), fmt.Sprintf("unknown field %q: %s has no such field", key, md.Name()))
		}
		if err := jsonField(fd, v, joinPath(path, string(fd.Name()))); err != nil {
			return err
		}
	}
	return nil
}

// jsonField checks the JSON value of one field.
func jsonField(fd protoreflect.FieldDescriptor, v any, path string) error {
	switch {
	case v == nil:
		return nil
	case fd.IsList():
		list, _ := v.([]any)
		for i, e := range list {
			if err := jsonValue(fd, e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case fd.IsMap():
		obj, _ := v.(map[string]any)
		for k, e := range obj {
			if err := jsonValue(fd.MapValue(), e, fmt.Sprintf("%s[%s]", path, k)); err != nil {
				return err
			}
		}
	default:
		return jsonValue(fd, v, path)
	}
	return nil
}

// jsonValue checks one enum or message value.
func jsonValue(fd protoreflect.FieldDescriptor, v any, path string) error {
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
		return jsonViolation(fd.Message(), v, path)
	}
	return nil
}

// mapKeyParam matches a query key addressing a map entry, "labels[k]".
var mapKeyParam = regexp.MustCompile(`^(.*)\[(.*)\]$`)

// queryViolation returns a field error for the first query parameter that
// names no field of the request.
func queryViolation(md protoreflect.MessageDescriptor, values url.Values) error {
	for key := range values {
		field := key
		if m := mapKeyParam.FindStringSubmatch(key); m != nil {
			field = m[1]
		}
		if !queryFieldExists(md, strings.Split(field, ".")) {
			return invalidField(key, fmt.Sprintf("unknown query parameter %q: %s has no such field", key, md.Name()))
		}
	}
	return nil
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

// strictQuery is the gateway's query parser: the default one, after it
// refused a parameter that names no field (the default ignores those, so
// a typo such as ?fleetID= passed unseen).
type strictQuery struct{}

// Parse refuses unknown parameters, then parses as the default parser does.
func (strictQuery) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	if err := queryViolation(msg.ProtoReflect().Descriptor(), values); err != nil {
		return err
	}
	return (&runtime.DefaultQueryParser{}).Parse(msg, values, filter)
}
