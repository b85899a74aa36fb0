package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/platform/tlsfiles"
	"github.com/tetherhq/tether/services/testkit/testcerts"
)

// TestClientCAsRotateWithoutARestart: a server that requires client
// certificates of the authorities in a file takes a new authority, and
// drops the old one, when the file changes, for new connections.
func TestClientCAsRotateWithoutARestart(t *testing.T) {
	dir := t.TempDir()
	srvCert, srvKey := filepath.Join(dir, "srv.crt"), filepath.Join(dir, "srv.key")
	testcerts.Write(t, srvCert, srvKey, "server")
	serving, err := tlsfiles.New(srvCert, srvKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	oldCert, oldKey := filepath.Join(dir, "old.crt"), filepath.Join(dir, "old.key")
	testcerts.WriteClient(t, oldCert, oldKey, "old-client")
	newCert, newKey := filepath.Join(dir, "new.crt"), filepath.Join(dir, "new.key")
	testcerts.WriteClient(t, newCert, newKey, "new-client")
	caFile := filepath.Join(dir, "client-ca.pem")
	copyFile(t, oldCert, caFile)
	cas, err := tlsfiles.LoadClientCAs(caFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := cas.Require(serving.Config())
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if tc, ok := c.(*tls.Conn); ok {
					_ = tc.Handshake()                               // its error is the client's to see
					_, _ = tc.Write([]byte(verifiedName(tc) + "\n")) // who the server saw
				}
			}()
		}
	}()
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(srvCert)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(pem)
	seen := func(cert, key string) string {
		t.Helper()
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", l.Addr().String(),
			&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}})
		if err != nil {
			return "refused"
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err != nil {
			return "refused" // TLS 1.3: the server's verdict arrives after the handshake
		}
		return string(buf[:n-1])
	}
	if got := seen(oldCert, oldKey); got != "old-client" {
		t.Fatalf("the old authority's client: %s", got)
	}
	// A certificate of an authority the server does not name is not sent
	// (or, sent anyway, refused): the client is not authenticated by it.
	if got := seen(newCert, newKey); got != "none" && got != "refused" {
		t.Fatalf("a client of an authority not yet trusted was seen as %s", got)
	}
	copyFile(t, newCert, caFile)
	if changed, err := cas.Reload(); err != nil || !changed {
		t.Fatalf("reload: %v, %v", changed, err)
	}
	if got := seen(newCert, newKey); got != "new-client" {
		t.Errorf("the new authority's client after the rotation: %s", got)
	}
	if got := seen(oldCert, oldKey); got != "none" && got != "refused" {
		t.Errorf("the retired authority's client after the rotation was seen as %s", got)
	}
}

// verifiedName is the common name of a connection's verified client
// certificate, "none" without one.
func verifiedName(c *tls.Conn) string {
	st := c.ConnectionState()
	if len(st.VerifiedChains) == 0 {
		return "none"
	}
	return st.VerifiedChains[0][0].Subject.CommonName
}

// copyFile replaces dst with src's content (written beside, then renamed).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".new", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".new", dst); err != nil {
		t.Fatal(err)
	}
}
