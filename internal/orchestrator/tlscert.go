package orchestrator

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"
)

// DefaultCertificateCheckInterval is how often, at most, CertificateFiles looks whether its files
// changed: a handshake costs two stat calls at most this often, and a renewed certificate is
// served within this time.
const DefaultCertificateCheckInterval = 5 * time.Second

// CertificateFiles serves the certificate and key of two PEM files and loads them again when
// they change, so a renewed certificate (cert-manager, a mounted Secret, certbot) is served
// without a restart. A new pair that does not load (half written, key and certificate not
// matching) leaves the last good pair in service and is logged; it is tried again once either
// file changes again.
type CertificateFiles struct {
	certFile, keyFile string
	log               *slog.Logger
	// CheckInterval is the least time between two looks at the files; zero means
	// DefaultCertificateCheckInterval. Set it before serving.
	CheckInterval time.Duration

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp // of certFile and keyFile when last loaded or tried
	checked time.Time
}

// fileStamp tells whether a file changed: a replacement (a rename over it, or a Kubernetes
// Secret volume's symlink swap, which Stat follows) changes its inode, a rewrite its modification
// time or size. The inode matters: modification times are coarse (a few milliseconds), and two
// certificates can have the same size.
type fileStamp struct {
	mod   time.Time
	size  int64
	inode uint64
}

// LoadCertificateFiles loads the pair, or says why it cannot: the orchestrator must not start
// without a certificate it can serve.
func LoadCertificateFiles(certFile, keyFile string, log *slog.Logger) (*CertificateFiles, error) {
	c := &CertificateFiles{certFile: certFile, keyFile: keyFile, log: log}
	stamp, err := c.stamps()
	if err == nil {
		c.cert, err = c.load()
	}
	if err != nil {
		return nil, err
	}
	c.stamp, c.checked = stamp, time.Now()
	return c, nil
}

// TLSConfig is the server configuration: TLS 1.2 or later, the certificate from the files.
func (c *CertificateFiles) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.GetCertificate}
}

// GetCertificate is tls.Config.GetCertificate: the pair in service, loaded again first if the
// files changed since the last look (at most one look per CheckInterval).
func (c *CertificateFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	every := c.CheckInterval
	if every <= 0 {
		every = DefaultCertificateCheckInterval
	}
	if now := time.Now(); now.Sub(c.checked) >= every {
		c.checked = now
		c.reloadIfChanged()
	}
	return c.cert, nil
}

// reloadIfChanged loads the pair again when a file's stamp changed; c.mu is held.
func (c *CertificateFiles) reloadIfChanged() {
	stamp, err := c.stamps()
	if err != nil {
		// A file briefly missing while it is replaced is no reason to stop serving; say so once.
		if c.stamp != [2]fileStamp{} {
			c.log.Warn("TLS certificate files cannot be read; still serving the certificate loaded before", "err", err)
			c.stamp = [2]fileStamp{}
		}
		return
	}
	if stamp == c.stamp {
		return
	}
	c.stamp = stamp
	cert, err := c.load()
	if err != nil {
		c.log.Warn("the changed TLS certificate files do not load; still serving the certificate loaded before, and trying again when either file changes",
			"err", err, "serving_not_after", c.cert.Leaf.NotAfter)
		return
	}
	c.cert = cert
	c.log.Info("loaded the changed TLS certificate", "cert_file", c.certFile, "subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
}

func (c *CertificateFiles) stamps() ([2]fileStamp, error) {
	var s [2]fileStamp
	for i, f := range []string{c.certFile, c.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			return s, fmt.Errorf("TLS certificate file: %w", err)
		}
		s[i] = fileStamp{mod: st.ModTime(), size: st.Size()}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			s[i].inode = sys.Ino
		}
	}
	return s, nil
}

func (c *CertificateFiles) load() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s with key %s: %w (both PEM; the key must belong to the first certificate)", c.certFile, c.keyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("TLS certificate %s: %w", c.certFile, err)
		}
	}
	if time.Now().After(cert.Leaf.NotAfter) {
		return nil, errors.New("TLS certificate " + c.certFile + " expired at " + cert.Leaf.NotAfter.UTC().Format(time.RFC3339) + "; renew it")
	}
	return &cert, nil
}
