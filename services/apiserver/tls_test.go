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
	"google.golang.org/grpc/credentials/insecure"

	tetherv1 "github.com/tetherhq/tether/proto/tether/v1"
	"github.com/tetherhq/tether/sdk/go/apiclient"
	"github.com/tetherhq/tether/services/apiserver"
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
