package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetherhq/tether/services/platform/tlsfiles"
	"github.com/tetherhq/tether/services/testkit/testcerts"
	"github.com/tetherhq/tether/services/testkit/wait"
)

// served is the serial number of the certificate r serves now.
func served(t *testing.T, r *tlsfiles.Reloader) string {
	t.Helper()
	c, err := r.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.String()
}

// A renewed certificate is served without a restart; a pair that does
// not load (a key that does not match) leaves the last good one served.
func TestReloaderServesTheRenewedCertificate(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key")
	first := testcerts.Write(t, cert, key, "first")
	r, err := tlsfiles.New(cert, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := served(t, r); got != first.String() {
		t.Fatalf("serving %s, want the first certificate %s", got, first)
	}
	second := testcerts.Write(t, cert, key, "second")
	wait.For(t, 10*time.Second, "the renewed certificate to be served", func() bool { return served(t, r) == second.String() })

	// A new certificate with the old key: refused, the second stays.
	other := t.TempDir()
	testcerts.Write(t, filepath.Join(other, "c"), filepath.Join(other, "k"), "third")
	b, err := os.ReadFile(filepath.Join(other, "c"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cert, b, 0o600); err != nil {
		t.Fatal(err)
	}
	wait.Holds(t, 2500*time.Millisecond, "the second certificate to stay served", func() bool { return served(t, r) == second.String() })

	if _, err := tlsfiles.New(filepath.Join(dir, "missing.crt"), key, nil); err == nil {
		t.Error("New with a missing certificate: no error")
	}
}
