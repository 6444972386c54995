package debian

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// newKey makes an OpenPGP signing key in a GnuPG home of its own and returns the home.
func newKey(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"gpg", "gpgv", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (apt-get install gpg gpgv dpkg): %v", tool, err)
		}
	}
	home := t.TempDir()
	run(t, "gpg", "--batch", "--homedir", home, "--pinentry-mode", "loopback", "--passphrase", "",
		"--quick-gen-key", "Outpost Test Archive <archive@example.invalid>", "ed25519", "sign", "1d")
	return home
}

// buildDeb builds package hello 1.0 holding a file with content.
func buildDeb(t *testing.T, dir, content string) string {
	t.Helper()
	root := filepath.Join(dir, "pkg-"+fmt.Sprint(len(content)))
	must(t, os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755))
	must(t, os.MkdirAll(filepath.Join(root, "usr/share/hello"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "DEBIAN/control"), []byte("Package: hello\nVersion: 1.0\nArchitecture: all\nMaintainer: Test <t@example.invalid>\nDescription: test\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "usr/share/hello/greeting"), []byte(content), 0o644))
	deb := filepath.Join(dir, "hello-"+fmt.Sprint(len(content))+".deb")
	run(t, "dpkg-deb", "--root-owner-group", "--build", root, deb)
	return deb
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func sha(t *testing.T, p string) string {
	t.Helper()
	s, _, err := fileSHA256(p)
	must(t, err)
	return s
}

// signIndex writes the package list naming deb and its InRelease signed with the key in home.
func signIndex(t *testing.T, home, idx, deb string) {
	t.Helper()
	const prefix = "test.invalid_debian_dists_test_"
	pkgs := filepath.Join(idx, prefix+"main_binary-amd64_Packages")
	must(t, os.WriteFile(pkgs, fmt.Appendf(nil, "Package: hello\nVersion: 1.0\nArchitecture: all\nFilename: pool/h/hello_1.0_all.deb\nSHA256: %s\n\n", sha(t, deb)), 0o644))
	fi, err := os.Stat(pkgs)
	must(t, err)
	release := filepath.Join(t.TempDir(), "Release")
	must(t, os.WriteFile(release, fmt.Appendf(nil, "Origin: Test\nSuite: test\nSHA256:\n %s %d main/binary-amd64/Packages\n", sha(t, pkgs), fi.Size()), 0o644))
	in := filepath.Join(idx, prefix+"InRelease")
	_ = os.Remove(in)
	run(t, "gpg", "--batch", "--homedir", home, "--pinentry-mode", "loopback", "--passphrase", "", "--clearsign", "--output", in, release)
}

// TestCacheIsTrustedOnlyAsFarAsTheArchiveSignature (N8): a cached package set is used only when
// the chain from the archive keyring (outside the cache) to every .deb holds. Someone who can
// write the cache swaps a package and fixes up its lock file, then its package list too, then
// signs the index with a key of their own, then removes the index: each time the set is refused,
// naming the broken link. A cache directory that others can write, or that another user owns,
// is refused before anything is read.
func TestCacheIsTrustedOnlyAsFarAsTheArchiveSignature(t *testing.T) {
	ctx := context.Background()
	work := t.TempDir()
	home := newKey(t)
	keyring := filepath.Join(work, "archive-keyring.gpg")
	pub, err := exec.CommandContext(t.Context(), "gpg", "--homedir", home, "--export").Output()
	must(t, err)
	must(t, os.WriteFile(keyring, pub, 0o644))
	req := Request{Archive: Archive{Name: "test", Sources: []string{"http://test.invalid/debian test main"}, Keyring: keyring},
		Arch: "amd64", Packages: []string{"hello"}}

	cache := filepath.Join(work, "cache")
	dir := filepath.Join(cache, "debian", req.key())
	idx := filepath.Join(dir, indexDir)
	must(t, os.MkdirAll(idx, 0o755))
	must(t, os.Chmod(filepath.Join(cache, "debian"), 0o700))
	good := buildDeb(t, work, "hello")
	cached := filepath.Join(dir, "hello_1.0_all.deb")
	must(t, os.WriteFile(cached, must2(os.ReadFile(good)), 0o644))
	writeLock := func() {
		must(t, os.WriteFile(filepath.Join(dir, lockName), fmt.Appendf(nil, "hello\t1.0\tall\t%s\thello_1.0_all.deb\n", sha(t, cached)), 0o644))
	}
	writeLock()
	signIndex(t, home, idx, good)

	var log bytes.Buffer
	set, err := Fetch(ctx, cache, req, false, &log)
	if err != nil || len(set.Packages) != 1 || set.Packages[0].SHA256 != sha(t, good) {
		t.Fatalf("the genuine cached set: %v %+v\n%s", err, set, log.String())
	}

	evil := buildDeb(t, work, "hello, with something else inside")
	must(t, os.WriteFile(cached, must2(os.ReadFile(evil)), 0o644))
	writeLock() // the lock file alone vouched for it before
	check := func(what, want string) {
		t.Helper()
		_, err := readSet(ctx, dir, req)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error saying %q", what, err, want)
		}
		t.Logf("%s: refused: %v", what, err)
	}
	check("a swapped .deb with its lock file fixed up", "is not the one the archive's signed package lists give")
	pkgs, _ := filepath.Glob(filepath.Join(idx, "*_Packages"))
	must(t, os.WriteFile(pkgs[0], fmt.Appendf(nil, "Package: hello\nVersion: 1.0\nArchitecture: all\nSHA256: %s\n\n", sha(t, evil)), 0o644))
	check("the package list fixed up too", "the signed index gives")
	signIndex(t, newKey(t), idx, evil)
	check("the index signed with another key", "signature does not verify")
	must(t, os.RemoveAll(idx))
	check("the index removed", "no signed archive index")

	// A cache others can write, or another user's, is refused outright.
	must(t, os.Chmod(cache, 0o777))
	if _, err := Fetch(ctx, cache, req, false, &log); err == nil || !strings.Contains(err.Error(), "writable by other users") {
		t.Errorf("a world-writable cache: %v", err)
	}
	must(t, os.Chmod(cache, 0o755))
	if os.Getuid() == 0 {
		must(t, os.Chown(cache, 65534, 65534))
		if _, err := Fetch(ctx, cache, req, false, &log); err == nil || !strings.Contains(err.Error(), "belongs to user 65534") {
			t.Errorf("another user's cache: %v", err)
		}
	}
}

func must2(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
