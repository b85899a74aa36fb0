package apiserver_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/tetherhq/tether/services/platform/apikeys"
)

// gRPC server reflection is on, so grpcurl and buf curl work without the
// protos: any role may list the services once authenticated; no key, no
// answer.
func TestServerReflection(t *testing.T) {
	keys, key, _ := roleKeys(t)
	s := newStack(t, stackOptions{keys: keys})
	conn, err := grpc.NewClient(s.grpcAddrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	list := func(k string) ([]string, error) {
		ctx, cancel := context.WithTimeout(s.Ctx, 10*time.Second)
		defer cancel()
		if k != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+k)
		}
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			return nil, err
		}
		// A refused stream may end before the request is sent: Send
		// then says io.EOF, and Recv the status.
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
		}); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		resp, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		var names []string
		for _, svc := range resp.GetListServicesResponse().GetService() {
			names = append(names, svc.GetName())
		}
		return names, nil
	}
	if _, err := list(""); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no key: %v, want UNAUTHENTICATED", err)
	}
	for _, role := range []apikeys.Role{apikeys.Viewer, apikeys.Matchmaker} {
		names, err := list(key[role])
		if err != nil || !slices.Contains(names, "tether.v1.AllocationService") || !slices.Contains(names, "tether.v1.FleetService") {
			t.Errorf("%s lists services: %v %v", role, names, err)
		}
	}
}
