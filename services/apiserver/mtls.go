package apiserver

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/tetherhq/tether/services/platform/tlsfiles"
)

// clientCertHeader carries the names of a REST client's verified
// certificate from the gateway to the gRPC handlers. Only calls that
// arrive on the gateway's own listener are believed; the REST layer
// drops the header a client sends itself (Grpc-Metadata-…).
const clientCertHeader = "x-tether-client-cert"

// gatewayCreds serve TLS on the public gRPC listener and plain text on the
// gateway's own loopback listener, so a handler sees the TLS state (the
// client's certificate) of a gRPC caller.
type gatewayCreds struct {
	credentials.TransportCredentials
	plain   credentials.TransportCredentials
	gateway string // the gateway listener's address
}

func newGatewayCreds(cfg *tls.Config, gateway string) gatewayCreds {
	return gatewayCreds{TransportCredentials: credentials.NewTLS(cfg), plain: insecure.NewCredentials(), gateway: gateway}
}

// ServerHandshake implements credentials.TransportCredentials.
func (c gatewayCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if conn.LocalAddr().String() == c.gateway {
		return c.plain.ServerHandshake(conn)
	}
	return c.TransportCredentials.ServerHandshake(conn)
}

// Clone implements credentials.TransportCredentials.
func (c gatewayCreds) Clone() credentials.TransportCredentials {
	return gatewayCreds{TransportCredentials: c.TransportCredentials.Clone(), plain: c.plain.Clone(), gateway: c.gateway}
}

// fromGateway reports whether a call came through the REST gateway.
func fromGateway(ctx context.Context, gateway string) bool {
	p, ok := peer.FromContext(ctx)
	return ok && p.LocalAddr != nil && p.LocalAddr.String() == gateway
}

// clientCertNames returns the names of a call's verified client
// certificate: a gRPC caller's from its TLS state, a REST caller's as the
// gateway forwarded them. nil without one.
func clientCertNames(ctx context.Context, gateway string) []string {
	if fromGateway(ctx, gateway) {
		md, _ := metadata.FromIncomingContext(ctx)
		return md.Get(clientCertHeader)
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil
	}
	return verifiedNames(info.State)
}

// verifiedNames returns the names of a connection's verified client
// certificate, nil without one.
func verifiedNames(st tls.ConnectionState) []string {
	if len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return nil
	}
	return tlsfiles.Names(st.VerifiedChains[0][0])
}

// restCertNames returns the names of a REST request's verified client
// certificate, nil without one.
func restCertNames(r *http.Request) []string {
	if r.TLS == nil {
		return nil
	}
	return verifiedNames(*r.TLS)
}

// clientCertMetadata is the gateway's annotator that forwards a REST
// client's verified certificate names.
func clientCertMetadata(_ context.Context, r *http.Request) metadata.MD {
	names := restCertNames(r)
	if len(names) == 0 {
		return nil
	}
	return metadata.MD{clientCertHeader: names}
}
