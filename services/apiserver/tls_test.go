package apiserver_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/sdk/go/apiclient"
	"github.com/tetherhq/tether/services/apiserver"
	"github.com/tetherhq/tether/services/platform/apikeys"
	"github.com/tetherhq/tether/services/platform/tlsfiles"
	kit "github.com/tetherhq/tether/services/testkit/stack"
	"github.com/tetherhq/tether/services/testkit/testcerts"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// With a certificate, the API serves gRPC and REST over TLS only, and a
// renewed certificate is served to new connections without a restart.
func TestAPIServesTLSAndARenewedCertificate(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key")
	first := testcerts.Write(t, certFile, keyFile, "first")
	certs, err := tlsfiles.New(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := kit.New(t, kit.WithAPI(1, func(_ *kit.Stack, o *apiserver.Options) { o.TLS = certs.Config() }))
	api := k.APIs[0]
	ctx, cancel := context.WithTimeout(k.Ctx, 30*time.Second)
	defer cancel()

	withCA, err := apiclient.WithCA(certFile)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := apiclient.Dial([]string{api.GRPCAddr()}, withCA)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := tetherv1.NewFleetServiceClient(conn).ListFleets(ctx, &tetherv1.ListFleetsRequest{}); err != nil {
		t.Fatalf("gRPC over TLS: %v", err)
	}
	plain, err := grpc.NewClient(api.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	defer pcancel()
	if _, err := tetherv1.NewFleetServiceClient(plain).ListFleets(pctx, &tetherv1.ListFleetsRequest{}); err == nil {
		t.Error("gRPC in plain text to a TLS API: answered")
	}

	// REST, trusting the current certificate file each time.
	restSerial := func() (string, int) {
		t.Helper()
		pem, err := os.ReadFile(certFile)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
		resp, err := c.Get("https://" + api.HTTPAddr() + "/v1/fleets")
		if err != nil {
			return err.Error(), 0
		}
		defer resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber.String(), resp.StatusCode
	}
	if serial, code := restSerial(); serial != first.String() || code != http.StatusOK {
		t.Fatalf("REST over TLS: %s %d, want the first certificate and 200", serial, code)
	}
	if resp, err := http.Get("http://" + api.HTTPAddr() + "/v1/fleets"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("REST in plain text to a TLS API: 200")
		}
	}

	second := testcerts.Write(t, certFile, keyFile, "second")
	wait.For(t, 10*time.Second, "the renewed certificate on new REST connections", func() bool {
		serial, code := restSerial()
		return serial == second.String() && code == http.StatusOK
	})
}

// Plain text is served on loopback only: on an address other machines can
// reach, New refuses without a certificate unless told Insecure.
func TestPlainTextOnlyOnLoopbackUnlessInsecure(t *testing.T) {
	var base apiserver.Options
	kit.New(t, kit.WithAPI(1, func(_ *kit.Stack, o *apiserver.Options) {
		base = *o // a complete set of options, before this replica's changes
		o.GRPCAddr, o.Insecure = "0.0.0.0:0", true
	}))
	refused := base
	refused.GRPCAddr = "0.0.0.0:0"
	if _, err := apiserver.New(refused); err == nil || !strings.Contains(err.Error(), "--tls-cert") {
		t.Errorf("plain text on 0.0.0.0: %v, want a refusal that names --tls-cert", err)
	}
	onLoopback := base
	onLoopback.GRPCAddr, onLoopback.HTTPAddr = "127.0.0.1:0", "[::1]:0"
	if _, err := apiserver.New(onLoopback); err != nil && !strings.Contains(err.Error(), "listen") {
		t.Errorf("plain text on loopback: %v", err)
	}
}

// With client CAs, a verified client certificate that the keys file names
// (cert:NAME) authenticates its caller as that principal, over gRPC and
// REST, with the principal's role; an unlisted certificate, or a REST
// header that claims one, does not.
func TestClientCertificatesAuthenticate(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key")
	testcerts.Write(t, certFile, keyFile, "api")
	serverCerts, err := tlsfiles.New(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	mmCert, mmKey := filepath.Join(dir, "mm.crt"), filepath.Join(dir, "mm.key")
	testcerts.WriteClient(t, mmCert, mmKey, "mm.eu.example")
	otherCert, otherKey := filepath.Join(dir, "other.crt"), filepath.Join(dir, "other.key")
	testcerts.WriteClient(t, otherCert, otherKey, "unlisted.example")
	var bundle []byte
	for _, f := range []string{mmCert, otherCert} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		bundle = append(bundle, b...)
	}
	caFile := filepath.Join(dir, "client-ca.pem")
	if err := os.WriteFile(caFile, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	cas, err := tlsfiles.LoadClientCAs(caFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	keysFile := filepath.Join(dir, "keys")
	if err := os.WriteFile(keysFile, []byte("mm-eu matchmaker cert:mm.eu.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := apikeys.Load(keysFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := kit.New(t, kit.WithAPI(1, func(_ *kit.Stack, o *apiserver.Options) {
		o.TLS, o.ClientCAs, o.Keys = serverCerts.Config(), cas, keys
	}))
	api := k.APIs[0]
	ctx, cancel := context.WithTimeout(k.Ctx, 30*time.Second)
	defer cancel()
	serverPool := x509.NewCertPool()
	serverPEM, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	serverPool.AppendCertsFromPEM(serverPEM)
	clientTLS := func(cert, key string) *tls.Config {
		cfg := &tls.Config{RootCAs: serverPool}
		if cert != "" {
			pair, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		return cfg
	}
	fleets := func(cert, key string) tetherv1.FleetServiceClient {
		conn, err := grpc.NewClient(api.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(cert, key))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return tetherv1.NewFleetServiceClient(conn)
	}
	if _, err := fleets(mmCert, mmKey).ListFleets(ctx, &tetherv1.ListFleetsRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("the matchmaker's certificate lists fleets: %v, want PERMISSION_DENIED (a matchmaker may not)", err)
	}
	if _, err := fleets(mmCert, mmKey).DeleteFleet(ctx, &tetherv1.DeleteFleetRequest{Name: "fleets/none"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("the matchmaker's certificate deletes a fleet: %v, want PERMISSION_DENIED", err)
	}
	gs, err := grpc.NewClient(api.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(mmCert, mmKey))))
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	if _, err := tetherv1.NewGameServerServiceClient(gs).ListGameServers(ctx, &tetherv1.ListGameServersRequest{Parent: "fleets/-"}); err != nil {
		t.Errorf("the matchmaker's certificate lists game servers: %v", err)
	}
	if _, err := fleets(otherCert, otherKey).ListFleets(ctx, &tetherv1.ListFleetsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("an unlisted certificate: %v, want UNAUTHENTICATED", err)
	}
	if _, err := fleets("", "").ListFleets(ctx, &tetherv1.ListFleetsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no certificate, no key: %v, want UNAUTHENTICATED", err)
	}

	rest := func(cert, key string, header map[string]string) int {
		t.Helper()
		c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS(cert, key)}}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+api.HTTPAddr()+"/v1/fleets/-/gameServers", nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := rest(mmCert, mmKey, nil); code != http.StatusOK {
		t.Errorf("REST with the matchmaker's certificate: %d", code)
	}
	if code := rest("", "", map[string]string{"Grpc-Metadata-X-Tether-Client-Cert": "mm.eu.example"}); code != http.StatusUnauthorized {
		t.Errorf("REST claiming a certificate in a header: %d, want 401", code)
	}
	if code := rest(otherCert, otherKey, nil); code != http.StatusUnauthorized {
		t.Errorf("REST with an unlisted certificate: %d, want 401", code)
	}
}
