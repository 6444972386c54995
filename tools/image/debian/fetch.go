// Package debian puts Debian packages into image layers without installing them: apt resolves
// and downloads them from the real archive (it checks the archive's signature and every file's
// hash), the .deb files are kept in a cache keyed by the request with the archive's signed index
// (checked again on every read: verify.go), and their files are extracted
// straight into a layer. No maintainer script runs, so the layer is a pure function of the .deb
// files, for any architecture, on a machine that cannot execute that architecture; the little the
// scripts would have made (the CA bundle) is made here instead.
package debian

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Archive is where packages come from.
type Archive struct {
	// Name names the archive in cache keys and messages ("bookworm").
	Name string
	// Sources are sources.list lines without "deb" and options: "URI suite component...".
	Sources []string
	// Keyring is the OpenPGP keyring the archive's Release files must be signed with.
	Keyring string
}

// Bookworm is Debian 12 with its point-release updates and its security updates. The mirror
// moves: a new point release or security fix changes what a cold cache downloads.
var Bookworm = Archive{
	Name: "bookworm",
	Sources: []string{
		"http://deb.debian.org/debian bookworm main",
		"http://deb.debian.org/debian bookworm-updates main",
		"http://deb.debian.org/debian-security bookworm-security main",
	},
	Keyring: "/usr/share/keyrings/debian-archive-keyring.gpg",
}

// Request is a package set to fetch for one architecture.
type Request struct {
	Archive Archive
	// Arch is the Debian architecture ("amd64", "arm64").
	Arch string
	// Packages are wanted with their dependencies.
	Packages []string
	// Exclude names packages (real or virtual) that are never added, even when something depends
	// on them, each with the reason; a dependency on one counts as satisfied.
	Exclude map[string]string
}

// key identifies the request in the cache: everything that decides which files come back.
func (r Request) key() string {
	pkgs := slices.Clone(r.Packages)
	slices.Sort(pkgs)
	excl := make([]string, 0, len(r.Exclude))
	for name := range r.Exclude {
		excl = append(excl, name)
	}
	slices.Sort(excl)
	b, _ := json.Marshal(struct {
		Format   int
		Sources  []string
		Keyring  string
		Arch     string
		Packages []string
		Exclude  []string
	}{1, r.Archive.Sources, r.Archive.Keyring, r.Arch, pkgs, excl})
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%s-%s-%s", r.Archive.Name, r.Arch, hex.EncodeToString(sum[:])[:12])
}

// Package is one downloaded package.
type Package struct {
	Name, Version, Arch string
	// SHA256 is the digest of the .deb file.
	SHA256 string
	// File is the .deb file in the cache.
	File string
}

// Set is a resolved, downloaded package set, sorted by name.
type Set struct {
	Arch     string
	Packages []Package
}

// Names returns the package names.
func (s *Set) Names() []string {
	out := make([]string, len(s.Packages))
	for i, p := range s.Packages {
		out[i] = p.Name
	}
	return out
}

const lockName = "packages.lock"

// Fetch returns the request's package set from the cache under cacheDir, resolving and
// downloading it first when the cache does not have it (or when refresh is set, to pick up
// security updates). Progress goes to log. Two processes fetching the same request wait for each
// other; a fetch that fails or is interrupted leaves the cache as it was.
func Fetch(ctx context.Context, cacheDir string, req Request, refresh bool, log io.Writer) (*Set, error) {
	if len(req.Packages) == 0 || req.Arch == "" {
		return nil, errors.New("debian: a request needs an architecture and packages")
	}
	root := filepath.Join(cacheDir, "debian")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	for _, d := range []string{cacheDir, root} {
		if err := checkPrivate(d); err != nil {
			return nil, fmt.Errorf("debian: %w", err)
		}
	}
	key := req.key()
	dir := filepath.Join(root, key)
	unlock, err := lockFile(ctx, filepath.Join(root, "."+key+".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if !refresh {
		set, err := readSet(ctx, dir, req)
		if err == nil {
			return set, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(log, "debian: the cached package set %s is unusable (%v); fetching it again\n", dir, err)
		}
	}
	if err := checkTools(req.Archive.Keyring); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(root, ".fetch-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := fetchInto(ctx, tmp, req, log); err != nil {
		return nil, err
	}
	old := dir + ".old"
	_ = os.RemoveAll(old)
	if err := os.Rename(dir, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.Rename(filepath.Join(tmp, "debs"), dir); err != nil {
		return nil, err
	}
	_ = os.RemoveAll(old)
	return readSet(ctx, dir, req)
}

func fetchInto(ctx context.Context, tmp string, req Request, log io.Writer) error {
	start := time.Now()
	fmt.Fprintf(log, "debian: resolving %s for %s from %s (%s)...\n", strings.Join(req.Packages, ", "), req.Arch,
		req.Archive.Name, hosts(req.Archive.Sources))
	a, err := newApt(filepath.Join(tmp, "apt"), req.Archive, req.Arch)
	if err != nil {
		return err
	}
	if err := a.update(ctx, hosts(req.Archive.Sources)); err != nil {
		return err
	}
	names, err := resolve(req.Packages, req.Exclude, func(n []string) (map[string][]group, error) { return a.depends(ctx, n) })
	if err != nil {
		return fmt.Errorf("debian %s %s: %w", req.Archive.Name, req.Arch, err)
	}
	debs := filepath.Join(tmp, "debs")
	if err := os.Mkdir(debs, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(log, "debian: downloading %d packages for %s...\n", len(names), req.Arch)
	if err := a.download(ctx, debs, names); err != nil {
		return err
	}
	var lock strings.Builder
	var total int64
	for _, name := range names {
		matches, _ := filepath.Glob(filepath.Join(debs, name+"_*.deb"))
		if len(matches) != 1 {
			return fmt.Errorf("debian: apt-get download left %d files for %s", len(matches), name)
		}
		fields, err := control(ctx, matches[0], "Package", "Version", "Architecture")
		if err != nil {
			return err
		}
		if fields[0] != name {
			return fmt.Errorf("debian: %s holds package %s, not %s", matches[0], fields[0], name)
		}
		sum, size, err := fileSHA256(matches[0])
		if err != nil {
			return err
		}
		total += size
		fmt.Fprintf(&lock, "%s\t%s\t%s\t%s\t%s\n", name, fields[1], fields[2], sum, filepath.Base(matches[0]))
	}
	if err := os.WriteFile(filepath.Join(debs, lockName), []byte(lock.String()), 0o644); err != nil {
		return err
	}
	if err := keepIndexes(filepath.Join(tmp, "apt", "var", "lib", "apt", "lists"), debs); err != nil {
		return err
	}
	fmt.Fprintf(log, "debian: %d packages for %s (%.1f MiB) in %s\n", len(names), req.Arch, float64(total)/(1<<20), time.Since(start).Round(time.Second))
	return nil
}

func hosts(sources []string) string {
	var out []string
	for _, s := range sources {
		uri, _, _ := strings.Cut(s, " ")
		u := strings.TrimPrefix(strings.TrimPrefix(uri, "http://"), "https://")
		u, _, _ = strings.Cut(u, "/")
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return strings.Join(out, ", ")
}

// readSet reads a cached package set, checks every .deb against the digest it was locked with,
// and the whole set against the archive's signed index kept with it (verifyIndexes).
func readSet(ctx context.Context, dir string, req Request) (*Set, error) {
	set, err := readLock(dir, req.Arch)
	if err != nil {
		return nil, err
	}
	if err := verifyIndexes(ctx, dir, req.Archive.Keyring, set); err != nil {
		return nil, err
	}
	return set, nil
}

// readLock reads a package set's lock file and checks every .deb against its digest there.
func readLock(dir, arch string) (*Set, error) {
	f, err := os.Open(filepath.Join(dir, lockName))
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	set := &Set{Arch: arch}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) != 5 {
			return nil, fmt.Errorf("%s: bad line %q", lockName, sc.Text())
		}
		p := Package{Name: cols[0], Version: cols[1], Arch: cols[2], SHA256: cols[3], File: filepath.Join(dir, cols[4])}
		sum, _, err := fileSHA256(p.File)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		if sum != p.SHA256 {
			return nil, fmt.Errorf("%s: %s has digest %s, locked as %s", p.Name, p.File, sum, p.SHA256)
		}
		set.Packages = append(set.Packages, p)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(set.Packages) == 0 {
		return nil, fmt.Errorf("%s lists no package", filepath.Join(dir, lockName))
	}
	return set, nil
}

func fileSHA256(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// control returns the named fields of a .deb's control file, in order.
func control(ctx context.Context, deb string, fields ...string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "dpkg-deb", append([]string{"--field", deb}, fields...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb --field %s: %w", deb, err)
	}
	got := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if k, v, ok := strings.Cut(strings.TrimRight(line, "\n"), ": "); ok {
			got[k] = v
		}
	}
	vals := make([]string, len(fields))
	for i, f := range fields {
		if vals[i] = got[f]; vals[i] == "" {
			return nil, fmt.Errorf("%s has no %s field", deb, f)
		}
	}
	return vals, nil
}

// lockFile takes an exclusive lock on path, waiting for another holder until ctx ends.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
