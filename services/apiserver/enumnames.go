package apiserver

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

// The API's enums carry no type prefix (READY, HEALTH_CHECK_FAILED); the
// event payloads' enums do (LIFECYCLE_READY, REASON_HEALTH_CHECK_FAILED),
// as buf's lint asks of top-level enums. Event data, a server's state at a
// time and explanations' evidence are rendered from event messages, so
// their enum values are renamed here to the API's spelling: one spelling
// everywhere a user reads them.

// enumName is v's name without its enum's prefix: LIFECYCLE_READY of enum
// Lifecycle is READY, REASON_HOST_LOST of enum Reason is HOST_LOST.
func enumName(v protoreflect.EnumValueDescriptor) string {
	prefix := upperSnake(string(v.Parent().Name())) + "_"
	return strings.TrimPrefix(string(v.Name()), prefix)
}

// upperSnake spells a CamelCase name in UPPER_SNAKE_CASE, as enum value
// prefixes are: GameSessionEndReason is GAME_SESSION_END_REASON.
func upperSnake(name string) string {
	var b strings.Builder
	for i, r := range name {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// renameEnums rewrites, in s (the protojson object of a message of type
// md), every enum value to its name without its enum's prefix, in nested
// messages, lists and maps too.
func renameEnums(md protoreflect.MessageDescriptor, s *structpb.Struct) {
	if s == nil || isWellKnown(md) {
		return
	}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		v, ok := s.GetFields()[fd.JSONName()]
		if !ok {
			continue
		}
		switch {
		case fd.IsMap():
			for _, item := range v.GetStructValue().GetFields() {
				renameValue(fd.MapValue(), item)
			}
		case fd.IsList():
			for _, item := range v.GetListValue().GetValues() {
				renameValue(fd, item)
			}
		default:
			renameValue(fd, v)
		}
	}
}

// renameValue renames one value of field fd: an enum's name, or the enums
// inside a message.
func renameValue(fd protoreflect.FieldDescriptor, v *structpb.Value) {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		name, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return // null, or a number protojson wrote for a value it does not know
		}
		if ev := fd.Enum().Values().ByName(protoreflect.Name(name.StringValue)); ev != nil {
			v.Kind = &structpb.Value_StringValue{StringValue: enumName(ev)}
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		renameEnums(fd.Message(), v.GetStructValue())
	}
}

// isWellKnown reports whether md is a google.protobuf type, which protojson
// renders in its own form (a timestamp as a string, a Struct as itself):
// none holds an enum of ours.
func isWellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}
