// Package agoneswire pins the wire facts of Agones' contracts as Tether's
// protos carry them (proto/agones, proto/allocation): the full method names
// gRPC clients call, the HTTP rules REST clients use, and every message's
// fields by number, name, type and JSON name, and the JSON that Agones'
// gateways write and read. The expected values are tables written from
// Agones' published v1.56.0 protos; the tests check Tether's generated
// descriptors against them, so that a change which would break an
// Agones-built client fails here. It holds tests only.
package agoneswire

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	agonessdk "github.com/tetherhq/tether/proto/agones/dev/sdk"
	agonessdkalpha "github.com/tetherhq/tether/proto/agones/dev/sdk/alpha"
	agonessdkbeta "github.com/tetherhq/tether/proto/agones/dev/sdk/beta"
	agonesallocation "github.com/tetherhq/tether/proto/allocation"
)

// method is one RPC as Agones publishes it.
type method struct {
	full     string // "/package.Service/Method", what a gRPC client calls
	in, out  string // request and response message, full names
	streams  string // "", "client" or "server"
	verb     string // the google.api.http rule's verb
	path     string // its path template
	httpBody string // its body: "*", a field name, or "" for none
}

// methods lists every RPC of every Agones service, in Agones' order.
var methods = map[string][]method{
	"agones.dev.sdk.SDK": {
		{"/agones.dev.sdk.SDK/Ready", "agones.dev.sdk.Empty", "agones.dev.sdk.Empty", "", "POST", "/ready", "*"},
		{"/agones.dev.sdk.SDK/Allocate", "agones.dev.sdk.Empty", "agones.dev.sdk.Empty", "", "POST", "/allocate", "*"},
		{"/agones.dev.sdk.SDK/Shutdown", "agones.dev.sdk.Empty", "agones.dev.sdk.Empty", "", "POST", "/shutdown", "*"},
		{"/agones.dev.sdk.SDK/Health", "agones.dev.sdk.Empty", "agones.dev.sdk.Empty", "client", "POST", "/health", "*"},
		{"/agones.dev.sdk.SDK/GetGameServer", "agones.dev.sdk.Empty", "agones.dev.sdk.GameServer", "", "GET", "/gameserver", ""},
		{"/agones.dev.sdk.SDK/WatchGameServer", "agones.dev.sdk.Empty", "agones.dev.sdk.GameServer", "server", "GET", "/watch/gameserver", ""},
		{"/agones.dev.sdk.SDK/SetLabel", "agones.dev.sdk.KeyValue", "agones.dev.sdk.Empty", "", "PUT", "/metadata/label", "*"},
		{"/agones.dev.sdk.SDK/SetAnnotation", "agones.dev.sdk.KeyValue", "agones.dev.sdk.Empty", "", "PUT", "/metadata/annotation", "*"},
		{"/agones.dev.sdk.SDK/Reserve", "agones.dev.sdk.Duration", "agones.dev.sdk.Empty", "", "POST", "/reserve", "*"},
	},
	"agones.dev.sdk.alpha.SDK": {
		{"/agones.dev.sdk.alpha.SDK/PlayerConnect", "agones.dev.sdk.alpha.PlayerID", "agones.dev.sdk.alpha.Bool", "", "POST", "/alpha/player/connect", "*"},
		{"/agones.dev.sdk.alpha.SDK/PlayerDisconnect", "agones.dev.sdk.alpha.PlayerID", "agones.dev.sdk.alpha.Bool", "", "POST", "/alpha/player/disconnect", "*"},
		{"/agones.dev.sdk.alpha.SDK/SetPlayerCapacity", "agones.dev.sdk.alpha.Count", "agones.dev.sdk.alpha.Empty", "", "PUT", "/alpha/player/capacity", "*"},
		{"/agones.dev.sdk.alpha.SDK/GetPlayerCapacity", "agones.dev.sdk.alpha.Empty", "agones.dev.sdk.alpha.Count", "", "GET", "/alpha/player/capacity", ""},
		{"/agones.dev.sdk.alpha.SDK/GetPlayerCount", "agones.dev.sdk.alpha.Empty", "agones.dev.sdk.alpha.Count", "", "GET", "/alpha/player/count", ""},
		{"/agones.dev.sdk.alpha.SDK/IsPlayerConnected", "agones.dev.sdk.alpha.PlayerID", "agones.dev.sdk.alpha.Bool", "", "GET", "/alpha/player/connected/{playerID}", ""},
		{"/agones.dev.sdk.alpha.SDK/GetConnectedPlayers", "agones.dev.sdk.alpha.Empty", "agones.dev.sdk.alpha.PlayerIDList", "", "GET", "/alpha/player/connected", ""},
	},
	"agones.dev.sdk.beta.SDK": {
		{"/agones.dev.sdk.beta.SDK/GetCounter", "agones.dev.sdk.beta.GetCounterRequest", "agones.dev.sdk.beta.Counter", "", "GET", "/v1beta1/counters/{name}", ""},
		{"/agones.dev.sdk.beta.SDK/UpdateCounter", "agones.dev.sdk.beta.UpdateCounterRequest", "agones.dev.sdk.beta.Counter", "", "PATCH", "/v1beta1/counters/{counterUpdateRequest.name}", "counterUpdateRequest"},
		{"/agones.dev.sdk.beta.SDK/GetList", "agones.dev.sdk.beta.GetListRequest", "agones.dev.sdk.beta.List", "", "GET", "/v1beta1/lists/{name}", ""},
		{"/agones.dev.sdk.beta.SDK/UpdateList", "agones.dev.sdk.beta.UpdateListRequest", "agones.dev.sdk.beta.List", "", "PATCH", "/v1beta1/lists/{list.name}", "list"},
		{"/agones.dev.sdk.beta.SDK/AddListValue", "agones.dev.sdk.beta.AddListValueRequest", "agones.dev.sdk.beta.List", "", "POST", "/v1beta1/lists/{name}:addValue", "*"},
		{"/agones.dev.sdk.beta.SDK/RemoveListValue", "agones.dev.sdk.beta.RemoveListValueRequest", "agones.dev.sdk.beta.List", "", "POST", "/v1beta1/lists/{name}:removeValue", "*"},
	},
	"allocation.AllocationService": {
		{"/allocation.AllocationService/Allocate", "allocation.AllocationRequest", "allocation.AllocationResponse", "", "POST", "/gameserverallocation", "*"},
	},
}

// serviceDescs are the generated gRPC registrations of the services, which
// decide the method names a gRPC server answers to.
var serviceDescs = []*grpc.ServiceDesc{
	&agonessdk.SDK_ServiceDesc,
	&agonessdkalpha.SDK_ServiceDesc,
	&agonessdkbeta.SDK_ServiceDesc,
	&agonesallocation.AllocationService_ServiceDesc,
}

// TestServicesHaveAgonesMethodsAndHTTPRules checks each service's methods,
// in order and none more, with their messages, streaming and google.api.http
// rule, and that the generated gRPC registration serves the same full
// method names with the same streaming.
func TestServicesHaveAgonesMethodsAndHTTPRules(t *testing.T) {
	for service, want := range methods {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
		if err != nil {
			t.Errorf("service %s: %v", service, err)
			continue
		}
		sd := d.(protoreflect.ServiceDescriptor)
		var got []string
		for i := range sd.Methods().Len() {
			got = append(got, "/"+service+"/"+string(sd.Methods().Get(i).Name()))
		}
		var wantNames []string
		for _, m := range want {
			wantNames = append(wantNames, m.full)
		}
		if !slices.Equal(got, wantNames) {
			t.Errorf("%s has methods\n%v\nwant\n%v", service, got, wantNames)
		}
		for _, m := range want {
			md := sd.Methods().ByName(protoreflect.Name(m.full[strings.LastIndex(m.full, "/")+1:]))
			if md == nil {
				continue // reported above
			}
			checkMethod(t, md, m)
		}
	}

	for _, desc := range serviceDescs {
		want, ok := methods[desc.ServiceName]
		if !ok {
			t.Errorf("generated service %s is not in the table", desc.ServiceName)
			continue
		}
		served := map[string]string{}
		for _, m := range desc.Methods {
			served["/"+desc.ServiceName+"/"+m.MethodName] = ""
		}
		for _, s := range desc.Streams {
			kind := "server"
			if s.ClientStreams {
				kind = "client"
			}
			if s.ClientStreams && s.ServerStreams {
				kind = "both"
			}
			served["/"+desc.ServiceName+"/"+s.StreamName] = kind
		}
		if len(served) != len(want) {
			t.Errorf("gRPC registration of %s serves %d methods, want %d: %v", desc.ServiceName, len(served), len(want), served)
		}
		for _, m := range want {
			kind, ok := served[m.full]
			if !ok {
				t.Errorf("gRPC registration of %s does not serve %s", desc.ServiceName, m.full)
			} else if kind != m.streams {
				t.Errorf("gRPC registration serves %s streaming %q, want %q", m.full, kind, m.streams)
			}
		}
	}
}

// checkMethod compares one method descriptor with its row.
func checkMethod(t *testing.T, md protoreflect.MethodDescriptor, m method) {
	t.Helper()
	if got := string(md.Input().FullName()); got != m.in {
		t.Errorf("%s takes %s, want %s", m.full, got, m.in)
	}
	if got := string(md.Output().FullName()); got != m.out {
		t.Errorf("%s returns %s, want %s", m.full, got, m.out)
	}
	streams := ""
	switch {
	case md.IsStreamingClient() && md.IsStreamingServer():
		streams = "both"
	case md.IsStreamingClient():
		streams = "client"
	case md.IsStreamingServer():
		streams = "server"
	}
	if streams != m.streams {
		t.Errorf("%s streams %q, want %q", m.full, streams, m.streams)
	}

	rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
	if rule == nil {
		t.Errorf("%s has no google.api.http rule, want %s %s", m.full, m.verb, m.path)
		return
	}
	verb, path := httpPattern(rule)
	if verb != m.verb || path != m.path || rule.GetBody() != m.httpBody {
		t.Errorf("%s is served at %s %s (body %q), want %s %s (body %q)",
			m.full, verb, path, rule.GetBody(), m.verb, m.path, m.httpBody)
	}
	if n := len(rule.GetAdditionalBindings()); n != 0 || rule.GetResponseBody() != "" {
		t.Errorf("%s has %d additional bindings and response body %q; Agones has none",
			m.full, n, rule.GetResponseBody())
	}
}

// httpPattern returns a rule's verb and path template.
func httpPattern(rule *annotations.HttpRule) (verb, path string) {
	switch p := rule.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		return "GET", p.Get
	case *annotations.HttpRule_Post:
		return "POST", p.Post
	case *annotations.HttpRule_Put:
		return "PUT", p.Put
	case *annotations.HttpRule_Patch:
		return "PATCH", p.Patch
	case *annotations.HttpRule_Delete:
		return "DELETE", p.Delete
	case *annotations.HttpRule_Custom:
		return p.Custom.GetKind(), p.Custom.GetPath()
	}
	return "", ""
}

// field is one field as Agones publishes it. typ is written as in a .proto
// file, with full names: "string", "repeated string", "map<string,
// string>", "optional allocation.MetaPatch", and " [deprecated]" after it
// when Agones marks it so. json is the field's JSON name (what protojson
// writes by default and reads besides the proto name); "" when it is the
// proto name itself.
type field struct {
	number int
	name   string
	typ    string
	json   string
}

// messages lists every message of the four files, nested ones included
// (not the entries of maps), with every field in Agones' order.
var messages = map[string][]field{
	// agones.dev.sdk
	"agones.dev.sdk.Empty":    {},
	"agones.dev.sdk.KeyValue": {{1, "key", "string", ""}, {2, "value", "string", ""}},
	"agones.dev.sdk.Duration": {{1, "seconds", "int64", ""}},
	"agones.dev.sdk.GameServer": {
		{1, "object_meta", "agones.dev.sdk.GameServer.ObjectMeta", "objectMeta"},
		{2, "spec", "agones.dev.sdk.GameServer.Spec", ""},
		{3, "status", "agones.dev.sdk.GameServer.Status", ""},
	},
	"agones.dev.sdk.GameServer.ObjectMeta": {
		{1, "name", "string", ""},
		{2, "namespace", "string", ""},
		{3, "uid", "string", ""},
		{4, "resource_version", "string", "resourceVersion"},
		{5, "generation", "int64", ""},
		{6, "creation_timestamp", "int64", "creationTimestamp"},
		{7, "deletion_timestamp", "int64", "deletionTimestamp"},
		{8, "annotations", "map<string, string>", ""},
		{9, "labels", "map<string, string>", ""},
	},
	"agones.dev.sdk.GameServer.Spec": {{1, "health", "agones.dev.sdk.GameServer.Spec.Health", ""}},
	"agones.dev.sdk.GameServer.Spec.Health": {
		{1, "disabled", "bool", ""},
		{2, "period_seconds", "int32", "periodSeconds"},
		{3, "failure_threshold", "int32", "failureThreshold"},
		{4, "initial_delay_seconds", "int32", "initialDelaySeconds"},
	},
	"agones.dev.sdk.GameServer.Status": {
		{1, "state", "string", ""},
		{2, "address", "string", ""},
		{7, "addresses", "repeated agones.dev.sdk.GameServer.Status.Address", ""},
		{3, "ports", "repeated agones.dev.sdk.GameServer.Status.Port", ""},
		{4, "players", "agones.dev.sdk.GameServer.Status.PlayerStatus", ""},
		{5, "counters", "map<string, agones.dev.sdk.GameServer.Status.CounterStatus>", ""},
		{6, "lists", "map<string, agones.dev.sdk.GameServer.Status.ListStatus>", ""},
	},
	"agones.dev.sdk.GameServer.Status.Address": {{1, "type", "string", ""}, {2, "address", "string", ""}},
	"agones.dev.sdk.GameServer.Status.Port":    {{1, "name", "string", ""}, {2, "port", "int32", ""}},
	"agones.dev.sdk.GameServer.Status.PlayerStatus": {
		{1, "count", "int64", ""}, {2, "capacity", "int64", ""}, {3, "ids", "repeated string", ""},
	},
	"agones.dev.sdk.GameServer.Status.CounterStatus": {{1, "count", "int64", ""}, {2, "capacity", "int64", ""}},
	"agones.dev.sdk.GameServer.Status.ListStatus":    {{1, "capacity", "int64", ""}, {2, "values", "repeated string", ""}},

	// agones.dev.sdk.alpha
	"agones.dev.sdk.alpha.Empty":        {},
	"agones.dev.sdk.alpha.Count":        {{1, "count", "int64", ""}},
	"agones.dev.sdk.alpha.Bool":         {{1, "bool", "bool", ""}},
	"agones.dev.sdk.alpha.PlayerID":     {{1, "playerID", "string", ""}},
	"agones.dev.sdk.alpha.PlayerIDList": {{1, "list", "repeated string", ""}},

	// agones.dev.sdk.beta
	"agones.dev.sdk.beta.Empty": {},
	"agones.dev.sdk.beta.Counter": {
		{1, "name", "string", ""}, {2, "count", "int64", ""}, {3, "capacity", "int64", ""},
	},
	"agones.dev.sdk.beta.CounterUpdateRequest": {
		{1, "name", "string", ""},
		{2, "count", "google.protobuf.Int64Value", ""},
		{3, "capacity", "google.protobuf.Int64Value", ""},
		{4, "countDiff", "int64", ""},
	},
	"agones.dev.sdk.beta.GetCounterRequest": {{1, "name", "string", ""}},
	"agones.dev.sdk.beta.UpdateCounterRequest": {
		{1, "counterUpdateRequest", "agones.dev.sdk.beta.CounterUpdateRequest", ""},
	},
	"agones.dev.sdk.beta.List": {
		{1, "name", "string", ""}, {2, "capacity", "int64", ""}, {3, "values", "repeated string", ""},
	},
	"agones.dev.sdk.beta.GetListRequest": {{1, "name", "string", ""}},
	"agones.dev.sdk.beta.UpdateListRequest": {
		{1, "list", "agones.dev.sdk.beta.List", ""},
		{2, "update_mask", "google.protobuf.FieldMask", "updateMask"},
	},
	"agones.dev.sdk.beta.AddListValueRequest":    {{1, "name", "string", ""}, {2, "value", "string", ""}},
	"agones.dev.sdk.beta.RemoveListValueRequest": {{1, "name", "string", ""}, {2, "value", "string", ""}},

	// allocation
	"allocation.AllocationRequest": {
		{1, "namespace", "string", ""},
		{2, "multiClusterSetting", "allocation.MultiClusterSetting", ""},
		{3, "requiredGameServerSelector", "allocation.GameServerSelector [deprecated]", ""},
		{4, "preferredGameServerSelectors", "repeated allocation.GameServerSelector [deprecated]", ""},
		{5, "scheduling", "allocation.AllocationRequest.SchedulingStrategy", ""},
		{6, "metaPatch", "allocation.MetaPatch", ""},
		{7, "metadata", "allocation.MetaPatch", ""},
		{8, "gameServerSelectors", "repeated allocation.GameServerSelector", ""},
		{9, "priorities", "repeated allocation.Priority", ""},
		{10, "counters", "map<string, allocation.CounterAction>", ""},
		{11, "lists", "map<string, allocation.ListAction>", ""},
	},
	"allocation.AllocationResponse": {
		{2, "gameServerName", "string", ""},
		{3, "ports", "repeated allocation.AllocationResponse.GameServerStatusPort", ""},
		{4, "address", "string", ""},
		{8, "addresses", "repeated allocation.AllocationResponse.GameServerStatusAddress", ""},
		{5, "nodeName", "string", ""},
		{6, "source", "string", ""},
		{7, "metadata", "optional allocation.AllocationResponse.GameServerMetadata", ""},
		{9, "counters", "map<string, allocation.AllocationResponse.CounterStatus>", ""},
		{10, "lists", "map<string, allocation.AllocationResponse.ListStatus>", ""},
	},
	"allocation.AllocationResponse.GameServerStatusPort": {{1, "name", "string", ""}, {2, "port", "int32", ""}},
	"allocation.AllocationResponse.GameServerStatusAddress": {
		{1, "type", "string", ""}, {2, "address", "string", ""},
	},
	"allocation.AllocationResponse.GameServerMetadata": {
		{1, "labels", "map<string, string>", ""}, {2, "annotations", "map<string, string>", ""},
	},
	"allocation.AllocationResponse.CounterStatus": {
		{1, "count", "google.protobuf.Int64Value", ""}, {2, "capacity", "google.protobuf.Int64Value", ""},
	},
	"allocation.AllocationResponse.ListStatus": {
		{1, "values", "repeated string", ""}, {2, "capacity", "google.protobuf.Int64Value", ""},
	},
	"allocation.MultiClusterSetting": {
		{1, "enabled", "bool", ""}, {2, "policySelector", "allocation.LabelSelector", ""},
	},
	"allocation.MetaPatch": {
		{1, "labels", "map<string, string>", ""}, {2, "annotations", "map<string, string>", ""},
	},
	"allocation.LabelSelector": {{1, "matchLabels", "map<string, string>", ""}},
	"allocation.GameServerSelector": {
		{1, "matchLabels", "map<string, string>", ""},
		{2, "gameServerState", "allocation.GameServerSelector.GameServerState", ""},
		{3, "players", "allocation.PlayerSelector", ""},
		{4, "counters", "map<string, allocation.CounterSelector>", ""},
		{5, "lists", "map<string, allocation.ListSelector>", ""},
	},
	"allocation.PlayerSelector": {{1, "minAvailable", "uint64", ""}, {2, "maxAvailable", "uint64", ""}},
	"allocation.CounterSelector": {
		{1, "minCount", "int64", ""}, {2, "maxCount", "int64", ""},
		{3, "minAvailable", "int64", ""}, {4, "maxAvailable", "int64", ""},
	},
	"allocation.ListSelector": {
		{1, "containsValue", "string", ""}, {2, "minAvailable", "int64", ""}, {3, "maxAvailable", "int64", ""},
	},
	"allocation.Priority": {
		{1, "type", "allocation.Priority.Type", ""},
		{2, "key", "string", ""},
		{3, "order", "allocation.Priority.Order", ""},
	},
	"allocation.CounterAction": {
		{1, "action", "google.protobuf.StringValue", ""},
		{2, "amount", "google.protobuf.Int64Value", ""},
		{3, "capacity", "google.protobuf.Int64Value", ""},
	},
	"allocation.ListAction": {
		{1, "addValues", "repeated string", ""},
		{2, "capacity", "google.protobuf.Int64Value", ""},
		{3, "deleteValues", "repeated string", ""},
	},
}

// enums lists every enum of the four files with its values, which JSON
// writes by name.
var enums = map[string][]string{
	"allocation.AllocationRequest.SchedulingStrategy": {"Packed", "Distributed"},
	"allocation.GameServerSelector.GameServerState":   {"READY", "ALLOCATED"},
	"allocation.Priority.Type":                        {"Counter", "List"},
	"allocation.Priority.Order":                       {"Ascending", "Descending"},
}

// files are the four files, by the path buf gives them.
var files = []string{
	"agones/dev/sdk/sdk.proto",
	"agones/dev/sdk/alpha/alpha.proto",
	"agones/dev/sdk/beta/beta.proto",
	"allocation/allocation.proto",
}

// TestMessagesHaveAgonesFields checks that the four files declare exactly
// the messages and enums of the tables, each field with its number, name,
// type and JSON name, in Agones' order (the order JSON is written in), and
// each enum with its values numbered from 0.
func TestMessagesHaveAgonesFields(t *testing.T) {
	gotMessages := map[string]protoreflect.MessageDescriptor{}
	gotEnums := map[string]protoreflect.EnumDescriptor{}
	for _, path := range files {
		fd, err := protoregistry.GlobalFiles.FindFileByPath(path)
		if err != nil {
			t.Errorf("file %s: %v", path, err)
			continue
		}
		collect(fd.Messages(), fd.Enums(), gotMessages, gotEnums)
	}

	for name, want := range messages {
		md, ok := gotMessages[name]
		if !ok {
			t.Errorf("no message %s", name)
			continue
		}
		var got []field
		for i := range md.Fields().Len() {
			fd := md.Fields().Get(i)
			json := fd.JSONName()
			if json == string(fd.Name()) {
				json = ""
			}
			got = append(got, field{int(fd.Number()), string(fd.Name()), declared(fd), json})
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: %s", name, fieldDiff(got, want))
		}
	}
	for name := range gotMessages {
		if _, ok := messages[name]; !ok {
			t.Errorf("message %s is not in the table: Agones has no such message", name)
		}
	}

	for name, want := range enums {
		ed, ok := gotEnums[name]
		if !ok {
			t.Errorf("no enum %s", name)
			continue
		}
		var got []string
		for i := range ed.Values().Len() {
			v := ed.Values().Get(i)
			if int(v.Number()) != i {
				t.Errorf("%s.%s is %d, want %d", name, v.Name(), v.Number(), i)
			}
			got = append(got, string(v.Name()))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s has values %v, want %v", name, got, want)
		}
	}
	for name := range gotEnums {
		if _, ok := enums[name]; !ok {
			t.Errorf("enum %s is not in the table: Agones has no such enum", name)
		}
	}
}

// collect adds messages and enums, and those nested in the messages, to the
// maps by full name; the entry messages of map fields are left out.
func collect(ms protoreflect.MessageDescriptors, es protoreflect.EnumDescriptors,
	messages map[string]protoreflect.MessageDescriptor, enums map[string]protoreflect.EnumDescriptor) {
	for i := range es.Len() {
		enums[string(es.Get(i).FullName())] = es.Get(i)
	}
	for i := range ms.Len() {
		m := ms.Get(i)
		if m.IsMapEntry() {
			continue
		}
		messages[string(m.FullName())] = m
		collect(m.Messages(), m.Enums(), messages, enums)
	}
}

// declared writes a field's type as a .proto file declares it.
func declared(fd protoreflect.FieldDescriptor) string {
	var typ string
	switch {
	case fd.IsMap():
		typ = "map<" + kind(fd.MapKey()) + ", " + kind(fd.MapValue()) + ">"
	case fd.IsList():
		typ = "repeated " + kind(fd)
	case fd.HasOptionalKeyword():
		typ = "optional " + kind(fd)
	default:
		typ = kind(fd)
	}
	if opts, ok := fd.Options().(*descriptorpb.FieldOptions); ok && opts.GetDeprecated() {
		typ += " [deprecated]"
	}
	return typ
}

// kind is a field's scalar kind, or the full name of its message or enum.
func kind(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return string(fd.Message().FullName())
	case protoreflect.EnumKind:
		return string(fd.Enum().FullName())
	}
	return fd.Kind().String()
}

// fieldDiff says how two lists of fields differ: the fields only one has,
// or, when they hold the same fields, that the order differs.
func fieldDiff(got, want []field) string {
	var parts []string
	for _, f := range want {
		if !slices.Contains(got, f) {
			parts = append(parts, fmt.Sprintf("want %+v", f))
		}
	}
	for _, f := range got {
		if !slices.Contains(want, f) {
			parts = append(parts, fmt.Sprintf("have %+v", f))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("fields in the order %+v, want %+v", got, want)
	}
	return strings.Join(parts, "; ")
}
