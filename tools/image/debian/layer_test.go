package debian

import (
	"bytes"
	"context"
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

	"github.com/outpost-dev/terraform-provider-outpost/tools/image"
)

func TestDropped(t *testing.T) {
	for p, want := range map[string]bool{
		"usr/share/doc/git/copyright":        false,
		"usr/share/doc/git":                  false,
		"usr/share/doc/git/changelog.gz":     true,
		"usr/share/doc/git/contrib/x/README": true,
		"usr/share/man/man1/git.1.gz":        true,
		"usr/share/locale/de/LC_MESSAGES/x":  true,
		"usr/share/lintian/overrides/git":    true,
		"usr/bin/git":                        false,
		"usr/share/git-core/templates/hooks": false,
		"usr/share/ca-certificates/mozilla":  false,
		"usr/share/doc-base/x":               false,
	} {
		if got := dropped(p); got != want {
			t.Errorf("dropped(%s) = %v, want %v", p, got, want)
		}
	}
}

func TestStatusRecord(t *testing.T) {
	got := string(statusRecord([]byte("Package: git\nVersion: 1:2.39.5\nDescription: x\n y\n")))
	want := "Package: git\nStatus: install ok installed\nVersion: 1:2.39.5\nDescription: x\n y\n"
	if got != want {
		t.Errorf("statusRecord = %q, want %q", got, want)
	}
}

func selfSigned(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestAddCABundle(t *testing.T) {
	f := image.NewFiles()
	a, b := selfSigned(t, "A"), selfSigned(t, "B")
	_ = f.AddFile("usr/share/ca-certificates/mozilla/B.crt", 0o644, b)
	_ = f.AddFile("usr/share/ca-certificates/mozilla/A.crt", 0o644, bytes.TrimSuffix(a, []byte("\n")))
	_ = f.AddFile("usr/share/ca-certificates/mozilla/README", 0o644, []byte("not a cert"))
	n, err := AddCABundle(f)
	if err != nil || n != 2 {
		t.Fatalf("AddCABundle = %d, %v", n, err)
	}
	e, ok := f.Lookup(CABundle)
	if !ok || string(e.Data) != string(a)+string(b) {
		t.Errorf("bundle %q, want A then B, each ending in a newline", e.Data)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(e.Data) {
		t.Error("the bundle does not load into a cert pool")
	}

	bad := image.NewFiles()
	_ = bad.AddFile("usr/share/ca-certificates/x.crt", 0o644, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	if _, err := AddCABundle(bad); err == nil {
		t.Error("a broken certificate went into the bundle")
	}
	if _, err := AddCABundle(image.NewFiles()); err == nil {
		t.Error("an empty bundle was made")
	}
}

// requireApt skips a test that needs apt and Debian's mirror when they are not there, except in
// CI, where it fails: CI must run every test.
func requireApt(t *testing.T) {
	t.Helper()
	if err := checkTools(Bookworm.Keyring); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and this test cannot run: %v", err)
		}
		t.Skipf("cannot run without apt (CI=true makes this a failure): %v", err)
	}
}

func TestFetchResolvesDownloadsAndCaches(t *testing.T) {
	requireApt(t)
	ctx := context.Background()
	cache := t.TempDir()
	req := Request{Archive: Bookworm, Arch: "amd64", Packages: []string{"netbase", "ca-certificates"},
		Exclude: map[string]string{"openssl": "scripts only", "debconf": "scripts only", "debconf-2.0": "scripts only"}}
	var log bytes.Buffer
	set, err := Fetch(ctx, cache, req, false, &log)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(set.Names(), " "); got != "ca-certificates netbase" {
		t.Fatalf("package set %q, want ca-certificates netbase (their script-only dependencies excluded)", got)
	}
	if !strings.Contains(log.String(), "resolving netbase, ca-certificates for amd64") {
		t.Errorf("no progress output:\n%s", log.String())
	}
	for _, p := range set.Packages {
		if p.Version == "" || p.SHA256 == "" || !strings.HasPrefix(p.File, cache) {
			t.Errorf("package %+v", p)
		}
	}

	// Second time: from the cache, no apt.
	log.Reset()
	again, err := Fetch(ctx, cache, req, false, &log)
	if err != nil {
		t.Fatal(err)
	}
	if log.Len() != 0 || again.Packages[0].SHA256 != set.Packages[0].SHA256 {
		t.Errorf("second fetch did not come from the cache:\n%s", log.String())
	}

	// A damaged cache is noticed and fetched again.
	if err := os.WriteFile(set.Packages[0].File, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	log.Reset()
	if _, err := Fetch(ctx, cache, req, false, &log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "unusable") {
		t.Errorf("a damaged .deb went unnoticed:\n%s", log.String())
	}

	f := image.NewFiles()
	if err := AddTo(ctx, f, set); err != nil {
		t.Fatal(err)
	}
	n, err := AddCABundle(f)
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Errorf("the bundle holds %d certificates; Debian ships well over 100", n)
	}
	for _, p := range []string{"etc/services", "etc/protocols", "usr/share/doc/netbase/copyright",
		filepath.Join(StatusDir, "netbase"), filepath.Join(StatusDir, "ca-certificates"), CABundle} {
		if _, ok := f.Lookup(p); !ok {
			t.Errorf("%s is missing", p)
		}
	}
	for _, p := range f.Paths() {
		if dropped(p) {
			t.Errorf("%s should have been left out", p)
		}
	}
	st, _ := f.Lookup(filepath.Join(StatusDir, "netbase"))
	if !strings.HasPrefix(string(st.Data), "Package: netbase\nStatus: install ok installed\n") {
		t.Errorf("status record %q", st.Data)
	}
	if err := AddTo(ctx, image.NewFiles(), set, "git"); err == nil {
		t.Error("asking for a package the set lacks succeeded")
	}
}
