// Package apiclient connects a Go program (a matchmaker, a tool,
// tetherctl) to Tether's gRPC API when it runs as several stateless
// replicas: calls are spread over every replica (round robin), and a call a
// replica could not take (it is down, restarting, or went away mid-call:
// UNAVAILABLE) is retried on another, with backoff, by gRPC's own retry
// support.
//
// Retrying is safe because every Tether call is idempotent: reads are, and
// each mutating call carries a request id (NewRequestID) that the API
// de-duplicates across replicas, so a retried allocation returns the first
// attempt's game server instead of a second one.
package apiclient

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// ServiceConfig is the gRPC service config Dial applies: round robin over
// the replicas, and up to 5 attempts of any call that fails UNAVAILABLE,
// 50 ms to 1 s apart. gRPC only retries a call that has not yet received a
// response, so a stream that has started is not replayed.
const ServiceConfig = `{
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [{
    "name": [{}],
    "retryPolicy": {
      "maxAttempts": 5,
      "initialBackoff": "0.05s",
      "maxBackoff": "1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`

// Split parses a comma-separated endpoint list ("api-1:9090,api-2:9090"),
// trimming spaces and dropping empty entries.
func Split(list string) []string {
	var out []string
	for _, e := range strings.Split(list, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// Dial prepares a connection to the API replicas at endpoints (host:port
// each; or one gRPC target such as dns:///api.example:9090 behind which
// DNS lists the replicas). It connects on the first call. Without a
// transport credentials option it connects in plain text.
func Dial(endpoints []string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("apiclient: no API endpoint")
	}
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(ServiceConfig),
	}
	target := endpoints[0]
	if len(endpoints) > 1 {
		r := manual.NewBuilderWithScheme("tether-api")
		addrs := make([]resolver.Address, len(endpoints))
		for i, e := range endpoints {
			// Over TLS each replica's certificate is checked against its
			// own host, not the list's made-up target name.
			host, _, err := net.SplitHostPort(e)
			if err != nil {
				host = e
			}
			addrs[i] = resolver.Address{Addr: e, ServerName: host}
		}
		r.InitialState(resolver.State{Addresses: addrs})
		base = append(base, grpc.WithResolvers(r))
		target = r.Scheme() + ":///replicas"
	}
	conn, err := grpc.NewClient(target, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("apiclient: connect to %s: %w", strings.Join(endpoints, ","), err)
	}
	return conn, nil
}

// WithCA connects over TLS, trusting the certificate authorities in the
// PEM file caFile (a private CA, or the API's self-signed certificate);
// "" trusts the system's.
func WithCA(caFile string) (grpc.DialOption, error) { return WithTLS(caFile, "", "") }

// WithTLS connects over TLS, trusting the authorities of caFile (PEM;
// "": the system's), and, with certFile and keyFile, shows that client
// certificate (mutual TLS: an API whose keys file names the certificate,
// cert:NAME, authenticates the caller by it).
func WithTLS(caFile, certFile, keyFile string) (grpc.DialOption, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("apiclient: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("apiclient: %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("apiclient: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case certFile != "" || keyFile != "":
		return nil, fmt.Errorf("apiclient: a client certificate needs both its certificate and its key file")
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
}

// WithKey sends an API key with every call (Authorization: Bearer key),
// for an API that authenticates its callers (tether apiserver --api-keys).
// It is sent over plain text too when the connection is not TLS: use it
// so only on loopback or a trusted network.
func WithKey(key string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(bearerKey(key))
}

// bearerKey is an API key as per-call credentials.
type bearerKey string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (k bearerKey) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(k)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: the
// caller decides (WithKey's comment).
func (bearerKey) RequireTransportSecurity() bool { return false }

// NewRequestID returns a fresh idempotency key for a mutating call (its
// request_id field): retries of the call, on any replica, carry the same
// one, and the API applies the call once.
func NewRequestID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
	return prefix + hex.EncodeToString(b[:])
}
