package debian

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// A cached package set is trusted as far as the archive's signature reaches, not by its own
// lock file: the fetch keeps the archive's signed index (InRelease) and the package lists it
// names beside the .deb files, and every read of the cache checks the chain again: the
// signature against the archive keyring (which lives outside the cache), each list against the
// SHA-256 the signed index gives it, each .deb against the SHA-256 its list gives it. Someone who
// can write the cache can make it unusable, but cannot slip a package in. The cache must also be
// private (ours, written by nobody else), so a shared place such as $TMPDIR is refused.

// indexDir is where a package set keeps the archive's signed index and package lists.
const indexDir = "archive"

// keepIndexes copies the signed indexes and package lists apt fetched (lists, apt's
// var/lib/apt/lists) into the package set's directory debs.
func keepIndexes(lists, debs string) error {
	dst := filepath.Join(debs, indexDir)
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(lists)
	if err != nil {
		return err
	}
	n := 0
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(name, "_InRelease") && !strings.HasSuffix(name, "_Packages") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(lists, name))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			return err
		}
		if strings.HasSuffix(name, "_InRelease") {
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("debian: apt kept no signed index (InRelease) in %s; the archive must serve InRelease", lists)
	}
	return nil
}

// debKey names one .deb as the package lists do.
type debKey struct{ name, version, arch string }

// verifyIndexes checks the chain from the keyring to every package of set (see above) and
// returns an error naming the first link that does not hold.
func verifyIndexes(ctx context.Context, dir, keyring string, set *Set) error {
	idx := filepath.Join(dir, indexDir)
	ents, err := os.ReadDir(idx)
	if err != nil {
		return fmt.Errorf("the set has no signed archive index (%w)", err)
	}
	allowed := map[debKey]map[string]bool{}
	signed := 0
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, "_InRelease") {
			continue
		}
		content, err := verifySignature(ctx, filepath.Join(idx, name), keyring)
		if err != nil {
			return err
		}
		signed++
		sums := releaseSHA256(content)
		prefix := strings.TrimSuffix(name, "InRelease")
		for _, l := range ents {
			ln := l.Name()
			if !strings.HasPrefix(ln, prefix) || !strings.HasSuffix(ln, "_Packages") {
				continue
			}
			rel := strings.ReplaceAll(strings.TrimPrefix(ln, prefix), "_", "/")
			want, ok := sums[rel]
			if !ok {
				return fmt.Errorf("%s: the signed index %s lists no %s", ln, name, rel)
			}
			got, _, err := fileSHA256(filepath.Join(idx, ln))
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%s has digest %s, the signed index gives %s", ln, got, want)
			}
			if err := readPackages(filepath.Join(idx, ln), allowed); err != nil {
				return err
			}
		}
	}
	if signed == 0 {
		return errors.New("the set has no signed archive index")
	}
	for _, p := range set.Packages {
		if !allowed[debKey{p.Name, p.Version, p.Arch}][p.SHA256] {
			return fmt.Errorf("%s %s (%s): digest %s is not the one the archive's signed package lists give", p.Name, p.Version, p.Arch, p.SHA256)
		}
	}
	return nil
}

// verifySignature checks path's clear-signed OpenPGP signature with gpgv against keyring and
// returns what it signs.
func verifySignature(ctx context.Context, path, keyring string) ([]byte, error) {
	if _, err := exec.LookPath("gpgv"); err != nil {
		return nil, errors.New("gpgv not found: it checks the signature of the cached Debian archive index; install it with `apt-get install gpgv`")
	}
	out := path + ".verified"
	defer func() { _ = os.Remove(out) }()
	cmd := exec.CommandContext(ctx, "gpgv", "--quiet", "--keyring", keyring, "--output", out, path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: the signature does not verify with %s: %s", filepath.Base(path), keyring, strings.TrimSpace(stderr.String()))
	}
	return os.ReadFile(out)
}

// releaseSHA256 is the SHA256 section of a Release file: path → digest.
func releaseSHA256(release []byte) map[string]string {
	sums := map[string]string{}
	in := false
	for line := range strings.Lines(string(release)) {
		line = strings.TrimRight(line, "\r\n")
		if !strings.HasPrefix(line, " ") {
			in = line == "SHA256:"
			continue
		}
		if f := strings.Fields(line); in && len(f) == 3 {
			sums[f[2]] = f[0]
		}
	}
	return sums
}

// readPackages adds the packages of a Packages list to allowed.
func readPackages(path string, allowed map[debKey]map[string]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	var k debKey
	sum := ""
	flush := func() {
		if k.name != "" && sum != "" {
			if allowed[k] == nil {
				allowed[k] = map[string]bool{}
			}
			allowed[k][sum] = true
		}
		k, sum = debKey{}, ""
	}
	r := bufio.NewReaderSize(f, 1<<16)
	for {
		line, err := r.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if key, v, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(line, " ") {
			switch key {
			case "Package":
				k.name = v
			case "Version":
				k.version = v
			case "Architecture":
				k.arch = v
			case "SHA256":
				sum = v
			}
		} else if line == "" {
			flush()
		}
		if errors.Is(err, io.EOF) {
			flush()
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// checkPrivate refuses a cache directory that someone else could write: not ours, or writable
// by group or others (a shared $TMPDIR, a directory another user made first).
func checkPrivate(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("the cache %s belongs to user %d, not to this user (%d): someone else could change the packages in it; use a cache of your own (OUTPOST_CACHE)", dir, st.Uid, os.Getuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("the cache %s is writable by other users (mode %v): they could change the packages in it; `chmod go-w %s`, or use a cache of your own (OUTPOST_CACHE)", dir, fi.Mode().Perm(), dir)
	}
	return nil
}
