// Package statetls gives the agent's state backend TLS: a certificate authority the agent keeps
// in a Secret of its namespace (shared by its replicas, made by the first one that finds it
// empty), serving certificates it issues from that CA for the state Service's names, and the
// client configuration the standby's forwarder and the job pods trust it with. Without TLS the
// state credential and the state itself would cross the pod network in clear (SECURITY.md, L2).
package statetls

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// Data keys of the CA Secret.
const (
	CertKey = "ca.crt"
	KeyKey  = "ca.key"
)

// Validity of the CA and of the serving certificates. A serving certificate is issued anew when a
// third of its life is left, so a replica that runs for months never serves an expired one.
const (
	caValidity      = 10 * 365 * 24 * time.Hour
	servingValidity = 90 * 24 * time.Hour
	// backdate covers clocks of other nodes that run a little behind.
	backdate = 5 * time.Minute
)

// Authority is the state backend's CA.
type Authority struct {
	cert *x509.Certificate
	key  crypto.Signer
	// PEM is the CA certificate, what clients trust.
	PEM []byte
}

// ErrSecret says the CA Secret holds something that is not a CA this package made.
var ErrSecret = errors.New("statetls: the CA Secret does not hold a usable CA")

// Load returns the CA kept in Secret name: the one there, or a new one written into it when it
// is absent or empty (the chart creates it empty). Two replicas starting together write with the
// Secret's resourceVersion, so one wins and the other reads the winner's CA.
func Load(ctx context.Context, secrets corev1client.SecretInterface, name string) (*Authority, error) {
	for range 5 {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			a, data, err := newAuthority()
			if err != nil {
				return nil, err
			}
			_, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: corev1.SecretTypeOpaque, Data: data}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue // the other replica made it first
			}
			if err != nil {
				return nil, fmt.Errorf("statetls: creating the CA Secret %s: %w", name, err)
			}
			return a, nil
		case err != nil:
			return nil, fmt.Errorf("statetls: reading the CA Secret %s: %w", name, err)
		}
		if len(s.Data[CertKey]) > 0 || len(s.Data[KeyKey]) > 0 {
			a, err := parse(s.Data[CertKey], s.Data[KeyKey])
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %w (delete its data keys %s and %s and restart the agent to make a new CA)", ErrSecret, name, err, CertKey, KeyKey)
			}
			return a, nil
		}
		a, data, err := newAuthority()
		if err != nil {
			return nil, err
		}
		s = s.DeepCopy()
		s.Data = data
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // the other replica filled it first
		}
		if err != nil {
			return nil, fmt.Errorf("statetls: writing the CA into the Secret %s: %w", name, err)
		}
		return a, nil
	}
	return nil, fmt.Errorf("statetls: the CA Secret %s kept changing while it was read", name)
}

// newAuthority makes a CA and the Secret data that keeps it.
func newAuthority() (*Authority, map[string][]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "outpost-agent state backend CA"},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	a, err := parse(certPEM, keyPEM)
	return a, map[string][]byte{CertKey: certPEM, KeyKey: keyPEM}, err
}

func parse(certPEM, keyPEM []byte) (*Authority, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	key, ok := k.(crypto.Signer)
	if !ok || !cert.IsCA {
		return nil, errors.New("not a CA certificate and its key")
	}
	return &Authority{cert: cert, key: key, PEM: certPEM}, nil
}

// Issue returns a serving certificate for hosts (DNS names or IP addresses) signed by the CA.
func (a *Authority) Issue(hosts []string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "outpost-agent state backend"},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(servingValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tpl.IPAddresses = append(tpl.IPAddresses, ip)
		} else {
			tpl.DNSNames = append(tpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, a.cert, key.Public(), a.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// Pool is a certificate pool holding the CA alone.
func (a *Authority) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.cert)
	return p
}

// ServerConfig is the TLS configuration of the state backend: TLS 1.2 or later, a certificate for
// hosts issued from the CA, issued anew when a third of its life is left.
func (a *Authority) ServerConfig(hosts []string) (*tls.Config, error) {
	s := &serving{ca: a, hosts: hosts, now: time.Now}
	if _, err := s.get(); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.get() }}, nil
}

// ClientConfig is the TLS configuration that trusts the CA alone, for serverName.
func (a *Authority) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: a.Pool(), ServerName: serverName}
}

// serving keeps the current serving certificate.
type serving struct {
	ca    *Authority
	hosts []string
	now   func() time.Time

	mu   sync.Mutex
	cert *tls.Certificate
}

func (s *serving) get() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.cert != nil && s.cert.Leaf.NotAfter.Sub(now) > servingValidity/3 {
		return s.cert, nil
	}
	c, err := s.ca.Issue(s.hosts, now)
	if err != nil {
		if s.cert != nil && now.Before(s.cert.Leaf.NotAfter) {
			return s.cert, nil // still valid; the next handshake tries again
		}
		return nil, fmt.Errorf("statetls: issuing the serving certificate: %w", err)
	}
	s.cert = c
	return c, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}
