package testbed

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// serviceClusterIPRange is the Service CIDR; its first address is the `kubernetes` Service, which
// the serving certificate names so in-cluster style clients verify it too.
const (
	serviceClusterIPRange = "10.96.0.0/16"
	kubernetesServiceIP   = "10.96.0.1"
)

// pki is the key material of one test bed. It is generated in Go (ECDSA P-256, milliseconds)
// rather than by the API server's --cert-dir self-signing, so the kubeconfig carries a real CA and
// clients verify TLS the way they do against a real cluster.
type pki struct {
	caCert     []byte // PEM
	servingCrt []byte // PEM, signed by the CA, for 127.0.0.1, HostIP, localhost and the kubernetes Service
	servingKey []byte // PEM
	clientCert []byte // PEM, CN=outpost-admin O=system:masters, for client-certificate auth
	clientKey  []byte // PEM
	saKey      []byte // PEM, service account token signing key
	saPub      []byte // PEM, its public key
	token      string // bearer token of the admin (system:masters) in the token file

	ca    *x509.Certificate // the CA, for serving certificates of other servers (the registry)
	caKey *ecdsa.PrivateKey
	now   time.Time
}

// serving makes a serving certificate and key (PEM) signed by the CA for the given addresses.
func (p *pki) serving(cn string, ips ...net.IP) (certPEM, keyPEM []byte, err error) {
	return leaf(p.ca, p.caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips,
	}, p.now)
}

// newPKI makes the key material; bindIP is the address the API server listens on, which its
// serving certificate names besides 127.0.0.1.
func newPKI(bindIP string) (*pki, error) {
	p := &pki{}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now().Add(-time.Hour) // tolerate small clock differences
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "outpost-testbed-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("creating the test bed CA: %w", err)
	}
	ca, err = x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.caCert = pemBlock("CERTIFICATE", caDER)
	p.ca, p.caKey, p.now = ca, caKey, now

	p.servingCrt, p.servingKey, err = leaf(ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(bindIP), net.ParseIP(kubernetesServiceIP)},
	}, now)
	if err != nil {
		return nil, fmt.Errorf("creating the API server's serving certificate: %w", err)
	}
	p.clientCert, p.clientKey, err = leaf(ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: adminUser, Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, now)
	if err != nil {
		return nil, fmt.Errorf("creating the admin client certificate: %w", err)
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	p.saKey = pemBlock("EC PRIVATE KEY", der)
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	p.saPub = pemBlock("PUBLIC KEY", pubDER)

	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	p.token = hex.EncodeToString(tok)
	return p, nil
}

// adminUser is the user name of the token and client certificate; it is in system:masters.
const adminUser = "outpost-admin"

func leaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = now
	tmpl.NotAfter = now.Add(10 * 365 * 24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
