package apiserver

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/tetherhq/tether/proto/allocation" // registers Agones' allocation service
	_ "github.com/tetherhq/tether/proto/tether/v1"  // registers the services
	"github.com/tetherhq/tether/services/platform/apikeys"
)

// apiMethods lists the full method names of every RPC of the API's
// services, from their descriptors.
func apiMethods(t *testing.T) []string {
	t.Helper()
	var out []string
	// Tether's services, and Agones' allocation API, which the API server
	// serves beside them.
	for _, pkg := range []protoreflect.FullName{"tether.v1", "allocation"} {
		protoregistry.GlobalFiles.RangeFilesByPackage(pkg, func(f protoreflect.FileDescriptor) bool {
			for i := range f.Services().Len() {
				svc := f.Services().Get(i)
				for j := range svc.Methods().Len() {
					out = append(out, "/"+string(svc.FullName())+"/"+string(svc.Methods().Get(j).Name()))
				}
			}
			return true
		})
	}
	if len(out) == 0 {
		t.Fatal("no RPCs found in package tether.v1")
	}
	return out
}

// Deny by default: every RPC of the API is given an action, and no rule
// names an RPC that does not exist. A new RPC fails here until it is.
func TestEveryRPCHasAnAction(t *testing.T) {
	methods := apiMethods(t)
	for _, m := range methods {
		if _, ok := rpcActions[m]; !ok {
			t.Errorf("%s has no action in rpcActions: only admin may call it", m)
		}
	}
	for m := range rpcActions {
		if !slices.Contains(methods, m) {
			t.Errorf("rpcActions names %s, which is no RPC of the API", m)
		}
	}
}

// The permission matrix, RPC by RPC: the roles that may call each (admin
// may call all). docs/security.md shows the same table.
var wantMatrix = map[string][]apikeys.Role{
	"/tether.v1.FleetService/CreateFleet":   {apikeys.Operator},
	"/tether.v1.FleetService/GetFleet":      {apikeys.Operator, apikeys.Viewer, apikeys.Auditor},
	"/tether.v1.FleetService/ListFleets":    {apikeys.Operator, apikeys.Viewer, apikeys.Auditor},
	"/tether.v1.FleetService/UpdateFleet":   {apikeys.Operator},
	"/tether.v1.FleetService/DeleteFleet":   {apikeys.Operator},
	"/tether.v1.FleetService/PauseRollout":  {apikeys.Operator},
	"/tether.v1.FleetService/ResumeRollout": {apikeys.Operator},
	"/tether.v1.FleetService/UndoRollout":   {apikeys.Operator},

	"/tether.v1.GameServerService/ListGameServers":         {apikeys.Operator, apikeys.Matchmaker, apikeys.Viewer, apikeys.Auditor},
	"/tether.v1.GameServerService/GetGameServer":           {apikeys.Operator, apikeys.Matchmaker, apikeys.Viewer, apikeys.Auditor},
	"/tether.v1.GameServerService/CreateGameServer":        {apikeys.Operator},
	"/tether.v1.GameServerService/ShutdownGameServer":      {apikeys.Operator},
	"/tether.v1.GameServerService/DeleteGameServer":        {apikeys.Operator},
	"/tether.v1.GameServerService/StreamGameServerLogs":    {apikeys.Operator},
	"/tether.v1.GameServerService/UpdateGameServerCounter": {apikeys.Operator, apikeys.Matchmaker},
	"/tether.v1.GameServerService/UpdateGameServerList":    {apikeys.Operator, apikeys.Matchmaker},

	"/tether.v1.HostService/ListHosts":    {apikeys.Operator, apikeys.Viewer, apikeys.Auditor},
	"/tether.v1.HostService/GetHost":      {apikeys.Operator, apikeys.Viewer, apikeys.Auditor},
	"/tether.v1.HostService/CordonHost":   {apikeys.Operator},
	"/tether.v1.HostService/UncordonHost": {apikeys.Operator},
	"/tether.v1.HostService/DrainHost":    {apikeys.Operator},

	"/tether.v1.AllocationService/AllocateGameServer": {apikeys.Matchmaker},
	"/allocation.AllocationService/Allocate":          {apikeys.Matchmaker},

	"/tether.v1.GameSessionService/GetGameSession":         {apikeys.Operator, apikeys.Matchmaker, apikeys.Viewer, apikeys.Auditor},
	"/tether.v1.GameSessionService/ListGameSessions":       {apikeys.Operator, apikeys.Matchmaker, apikeys.Viewer, apikeys.Auditor},
	"/tether.v1.GameSessionService/GetPlayerSession":       {apikeys.Operator, apikeys.Matchmaker, apikeys.Viewer, apikeys.Auditor},
	"/tether.v1.GameSessionService/ListPlayerSessions":     {apikeys.Operator, apikeys.Matchmaker, apikeys.Viewer, apikeys.Auditor},
	"/tether.v1.GameSessionService/CreatePlayerSession":    {apikeys.Matchmaker},
	"/tether.v1.GameSessionService/ReconnectPlayerSession": {apikeys.Matchmaker},

	"/tether.v1.HistoryService/ListEvents":  {apikeys.Operator, apikeys.Auditor},
	"/tether.v1.HistoryService/GetStateAt":  {apikeys.Operator, apikeys.Auditor},
	"/tether.v1.HistoryService/Explain":     {apikeys.Operator, apikeys.Auditor},
	"/tether.v1.HistoryService/WatchEvents": {apikeys.Operator, apikeys.Viewer, apikeys.Auditor},

	"/tether.v1.ProjectionService/GetProjectionStatus": {apikeys.Operator, apikeys.Viewer, apikeys.Auditor},
	"/tether.v1.ProjectionService/ListDeadLetters":     {apikeys.Operator, apikeys.Viewer, apikeys.Auditor},
	"/tether.v1.ProjectionService/CheckProjections":    {apikeys.Operator},
	"/tether.v1.ProjectionService/RebuildProjections":  {apikeys.Operator},
	"/tether.v1.ProjectionService/RetryDeadLetter":     {apikeys.Operator},

	"/tether.v1.ArchiveService/GetArchiveStatus": {apikeys.Operator, apikeys.Viewer, apikeys.Auditor},
	"/tether.v1.ArchiveService/VerifyArchive":    {apikeys.Operator, apikeys.Auditor},
}

// Every RPC against every role: permits answers what the matrix says, and
// an RPC the matrix does not know is refused to all but admin.
func TestPermissionMatrix(t *testing.T) {
	for _, m := range apiMethods(t) {
		want, ok := wantMatrix[m]
		if !ok {
			t.Errorf("%s is missing from the test's matrix", m)
			continue
		}
		for _, role := range apikeys.Roles {
			allowed := role == apikeys.Admin || slices.Contains(want, role)
			if got := permits(role, m); got != allowed {
				t.Errorf("%s as %s: permitted %v, want %v", m, role, got, allowed)
			}
		}
	}
	for _, role := range apikeys.Roles {
		if got := permits(role, "/tether.v1.FleetService/NoSuchCall"); got != (role == apikeys.Admin) {
			t.Errorf("an unknown RPC as %s: permitted %v", role, got)
		}
	}
}
