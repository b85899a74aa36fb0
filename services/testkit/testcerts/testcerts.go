// Package testcerts writes self-signed TLS certificates for tests.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"testing"
	"time"
)

// Write makes a self-signed certificate for 127.0.0.1 and localhost,
// named cn, and writes it and its key as PEM to certFile and keyFile
// (replacing them whole: written beside, then renamed). It returns the
// certificate's serial number.
func Write(t testing.TB, certFile, keyFile, cn string) *big.Int {
	t.Helper()
	return write(t, certFile, keyFile, cn, x509.ExtKeyUsageServerAuth)
}

// WriteClient is Write for a client certificate (mutual TLS), named cn:
// self-signed, so its own file is the authority that verifies it.
func WriteClient(t testing.TB, certFile, keyFile, cn string) *big.Int {
	t.Helper()
	return write(t, certFile, keyFile, cn, x509.ExtKeyUsageClientAuth)
}

func write(t testing.TB, certFile, keyFile, cn string, usage x509.ExtKeyUsage) *big.Int {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IsCA:         true, BasicConstraintsValid: true,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:    []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	replace(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	replace(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return serial
}

func replace(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".new", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}
