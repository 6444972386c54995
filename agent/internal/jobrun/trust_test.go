package jobrun

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCAPEM is a fresh self-signed CA certificate.
func testCAPEM(t *testing.T, name string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// The CLI and git get one bundle: the image's own trust store (SSL_CERT_FILE when the image or
// the template sets it), then the extra CAs, so neither the public roots nor the corporate CA
// are lost.
func TestTrustEnvMergesImageStoreAndExtraCAs(t *testing.T) {
	dir := t.TempDir()
	system := testCAPEM(t, "image root")
	systemFile := filepath.Join(t.TempDir(), "image-roots.pem")
	if err := os.WriteFile(systemFile, system[:len(system)-1], 0o644); err != nil { // no final newline
		t.Fatal(err)
	}
	extra := testCAPEM(t, "corporate CA")
	env, note, err := trustEnv(dir, extra, func(k string) string {
		if k == "SSL_CERT_FILE" {
			return systemFile
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, trustBundleName)
	if len(env) != 2 || env[0] != "SSL_CERT_FILE="+bundle || env[1] != "GIT_SSL_CAINFO="+bundle {
		t.Fatalf("env = %v", env)
	}
	if !strings.Contains(note, systemFile) {
		t.Errorf("the log note does not say whose trust store was kept: %q", note)
	}
	got, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(got) || string(got) != string(system)+string(extra) {
		t.Fatalf("bundle is not the image's store followed by the extra CAs:\n%s", got)
	}
	var subjects []string
	for rest := got; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		subjects = append(subjects, c.Subject.CommonName)
	}
	if strings.Join(subjects, ",") != "image root,corporate CA" {
		t.Errorf("certificates in the bundle: %v", subjects)
	}

	// Without extra CAs the image's trust store is used as it is: nothing is set.
	if env, _, err := trustEnv(t.TempDir(), nil, os.Getenv); env != nil || err != nil {
		t.Errorf("no extra CAs: env %v, err %v", env, err)
	}
}

// The variables reach the CLI (and, through it, git and the providers).
func TestExtraCAsReachTheCLI(t *testing.T) {
	h := newHarness(t, fakeCLI(t, `n=$(grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE"); echo "apply sees $n certificates; git: $GIT_SSL_CAINFO"`, ""))
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, testCAPEM(t, "corporate CA"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := h.runJob(fakeDeploy(t, h), runOptions{env: map[string]string{"OUTPOST_CA_BUNDLE_FILE": caFile}})
	if r.Code != 0 {
		t.Fatalf("exit %d:\n%s", r.Code, r.Log)
	}
	if !strings.Contains(r.Log, "==> trusting the extra CA certificates") || !strings.Contains(r.Log, "/"+trustBundleName+"\n") ||
		strings.Contains(r.Log, "apply sees 0 certificates") || strings.Contains(r.Log, "apply sees 1 certificates") {
		t.Fatalf("the CLI did not get the image's roots plus the extra CA:\n%s", r.Log)
	}
}
