// Package tlsfiles serves TLS from a certificate and key in files, read
// again when they change, so a certificate is renewed (cert-manager,
// certbot, an operator's copy) without a restart.
package tlsfiles

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Reloader holds the certificate of a cert and key file pair and reloads
// it when either file changes. A pair that no longer loads (caught half
// written, or a key that does not match) leaves the loaded certificate in
// use, and says why in the log.
type Reloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string    // the files' sizes and times when loaded
	checked time.Time // last look at the files
}

// checkEvery bounds how often handshakes look at the files.
const checkEvery = time.Second

// New loads the pair; an error if it does not load.
func New(certFile, keyFile string, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{certFile: certFile, keyFile: keyFile, log: log}
	stamp, err := r.stampOf()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tlsfiles: %w", err)
	}
	r.cert, r.stamp, r.checked = &cert, stamp, time.Now()
	return r, nil
}

// stampOf describes the files as they are now.
func (r *Reloader) stampOf() (string, error) {
	var stamp string
	for _, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("tlsfiles: %w", err)
		}
		stamp += fmt.Sprintf("%d/%d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return stamp, nil
}

// GetCertificate is a tls.Config.GetCertificate that returns the current
// certificate, reloading it first if the files changed.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < checkEvery {
		return r.cert, nil
	}
	r.checked = time.Now()
	stamp, err := r.stampOf()
	if err != nil || stamp == r.stamp {
		if err != nil {
			r.log.Error("TLS certificate files unreadable; serving the one loaded", "cert", r.certFile, "err", err)
		}
		return r.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		r.log.Error("TLS certificate files refused; serving the one loaded", "cert", r.certFile, "err", err)
		return r.cert, nil
	}
	r.cert, r.stamp = &cert, stamp
	r.log.Info("TLS certificate reloaded", "cert", r.certFile)
	return r.cert, nil
}

// Config is a server TLS configuration (TLS 1.2 or newer) that serves the
// reloaded certificate.
func (r *Reloader) Config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
}
