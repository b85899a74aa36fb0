package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// strictJSON is the gateway's JSON marshaler: runtime.JSONPb, with a body
// decoder that also refuses what protojson takes but the API does not: an
// integer field's number written with an exponent or a fraction
// ("replicas": "1e3" was stored as 1000), and anything after the body's
// JSON value (protojson's decoder reads the first and ignores the rest).
// The gateway turns the refusal into INVALID_ARGUMENT, whose field its
// error handler finds again in the body (locateRefusal).
type strictJSON struct{ *runtime.JSONPb }

// NewDecoder returns a decoder of one request body from r.
func (m strictJSON) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error { return m.decode(r, v) })
}

// decode reads the whole body (guardBody has bounded it), checks it
// against v's message, and unmarshals it into v as runtime.JSONPb would. A
// body of white space alone is io.EOF, as from JSONPb: no body.
func (m strictJSON) decode(r io.Reader, v any) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return io.EOF
	}
	doc, err := decodeBody(data)
	if err != nil {
		return err
	}
	if md, ok := messageOf(v); ok {
		if err := (jsonWalk{request: md.Name()}).violation(md, doc, ""); err != nil {
			return err
		}
	}
	return m.Unmarshal(data, v)
}

// errTrailingData is the refusal of a body with more after its JSON value.
var errTrailingData = errors.New("the body holds more after its JSON value; send one JSON object")

// decodeBody decodes a body's one JSON value, numbers kept as they are
// written; anything but white space after it is an error.
func decodeBody(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("the body is not valid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errTrailingData
	}
	return doc, nil
}

// messageOf returns the descriptor of the message v decodes into: v is the
// message, or a pointer to a field that holds one (the gateway decodes a
// body field as &req.Fleet).
func messageOf(v any) (protoreflect.MessageDescriptor, bool) {
	if m, ok := v.(proto.Message); ok {
		return m.ProtoReflect().Descriptor(), true
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer {
		return nil, false
	}
	m, ok := reflect.Zero(rv.Type().Elem()).Interface().(proto.Message)
	if !ok {
		return nil, false
	}
	return m.ProtoReflect().Descriptor(), true
}
