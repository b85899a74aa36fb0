package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"

	"github.com/tetherhq/tether/services/platform/filewatch"
)

// ClientCAs are the authorities that sign the client certificates a
// server accepts (mutual TLS), read from a PEM file and read again when it
// changes (Reload, or the file's watch), so an authority is added or
// retired without a restart.
type ClientCAs struct {
	file *filewatch.File[*x509.CertPool]
}

// LoadClientCAs reads a PEM file of one or more CA certificates.
func LoadClientCAs(path string, log *slog.Logger) (*ClientCAs, error) {
	f, err := filewatch.Load(path, "TLS client CAs", func(b []byte) (*x509.CertPool, error) {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, errors.New("no PEM certificate in it")
		}
		return pool, nil
	}, log)
	if err != nil {
		return nil, fmt.Errorf("tlsfiles: %w", err)
	}
	return &ClientCAs{file: f}, nil
}

// Reload reads the file again if it changed.
func (c *ClientCAs) Reload() (bool, error) { return c.file.Reload() }

// File is the watched file (its Watch keeps it current).
func (c *ClientCAs) File() *filewatch.File[*x509.CertPool] { return c.file }

// Require returns cfg asking each client for a certificate and verifying
// one it sends against the current authorities (a client may send none,
// and authenticate by API key instead). cfg's other settings are kept as
// they are now: call it last.
func (c *ClientCAs) Require(cfg *tls.Config) *tls.Config {
	base := cfg.Clone()
	out := cfg.Clone()
	out.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		per := base.Clone()
		per.ClientAuth = tls.VerifyClientCertIfGiven
		per.ClientCAs = c.file.Value()
		return per, nil
	}
	return out
}

// Names returns what a verified client certificate says it is, to match a
// principal: its subject's common name, then its DNS, URI and e-mail
// subject alternative names.
func Names(cert *x509.Certificate) []string {
	var names []string
	if cert.Subject.CommonName != "" {
		names = append(names, cert.Subject.CommonName)
	}
	names = append(names, cert.DNSNames...)
	for _, u := range cert.URIs {
		names = append(names, u.String())
	}
	return append(names, cert.EmailAddresses...)
}
