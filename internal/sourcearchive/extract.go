package sourcearchive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Limits bound what an archive may unpack to. The orchestrator caps the compressed archive at
// 16 MiB; these bound what a small, highly compressible archive can expand to.
type Limits struct {
	// Bytes is the most the regular files may hold in all.
	Bytes int64
	// Entries is the most entries the archive may have.
	Entries int
}

// DefaultLimits are the job runner's limits.
var DefaultLimits = Limits{Bytes: 256 << 20, Entries: 20000}

// Stats describes an unpacked archive for the job log.
type Stats struct {
	Files, Dirs, Symlinks int
	Bytes                 int64
}

// Extract unpacks a gzip-compressed tar into dir, which must exist and be empty.
//
// The archive comes from whoever can create deployments, so it is hostile until shown
// otherwise. Every file operation goes through an os.Root opened on dir, so no name, link or
// chain of links can reach outside it, whatever the checks below miss; the checks are there to
// refuse early with a message that names the entry:
//   - entry names must be relative and must not contain "..";
//   - nothing is written through a symlink: links are created only after every file and
//     directory, no entry may lie below a link of the archive, and every parent must be a real
//     directory;
//   - a link's target must be relative, and once all links exist each must resolve (through any
//     chain of links) to an entry inside dir; an escaping or dangling link is refused;
//   - hard links become copies of a regular file unpacked earlier;
//   - devices, FIFOs and other special entries are refused; ownership is ignored and modes are
//     reduced to rwx bits without setuid, setgid or sticky;
//   - the unpacked size and the number of entries are capped (gzip bombs).
func Extract(data []byte, dir string, lim Limits) (Stats, error) {
	var st Stats
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return st, fmt.Errorf("inline source is not gzip data: %w", err)
	}
	defer zr.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return st, fmt.Errorf("inline source: %w", err)
	}
	defer root.Close()
	tr := tar.NewReader(zr)
	type link struct{ name, target string }
	var links []link
	seen := map[string]bool{}
	linkNames := map[string]bool{}
	for entries := 0; ; entries++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("inline source is not a valid tar archive: %w", err)
		}
		if entries >= lim.Entries {
			return st, fmt.Errorf("inline source has more than %d entries", lim.Entries)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := cleanEntryName(hdr.Name)
		if err != nil {
			return st, err
		}
		if name == "." {
			if hdr.Typeflag == tar.TypeDir {
				continue // "./" entries, as `tar -C dir .` writes them
			}
			return st, fmt.Errorf("inline source: entry %q has no name", hdr.Name)
		}
		if hdr.Typeflag != tar.TypeDir && seen[name] {
			return st, fmt.Errorf("inline source: entry %q appears twice", name)
		}
		seen[name] = true
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			if linkNames[p] {
				return st, fmt.Errorf("inline source: entry %q would be written through the symlink %q", name, p)
			}
		}
		if err := checkParents(root, name); err != nil {
			return st, err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return st, fmt.Errorf("inline source: %w", err)
			}
			st.Dirs++
		case tar.TypeReg, tar.TypeGNUSparse: // the reader reports old-style TypeRegA as TypeReg
			if st.Bytes+hdr.Size > lim.Bytes {
				return st, fmt.Errorf("inline source unpacks to more than %d MiB", lim.Bytes>>20)
			}
			n, err := writeFile(root, name, tr, hdr.FileInfo().Mode().Perm(), lim.Bytes-st.Bytes)
			st.Bytes += n
			if err != nil {
				return st, fmt.Errorf("inline source: %s: %w", name, err)
			}
			if st.Bytes > lim.Bytes {
				return st, fmt.Errorf("inline source unpacks to more than %d MiB", lim.Bytes>>20)
			}
			st.Files++
		case tar.TypeLink:
			src, err := cleanEntryName(hdr.Linkname)
			if err != nil || src == "." {
				return st, fmt.Errorf("inline source: hard link %q points to %q, outside the archive", name, hdr.Linkname)
			}
			n, err := copyHardLink(root, src, name, lim.Bytes-st.Bytes)
			st.Bytes += n
			if err != nil {
				return st, fmt.Errorf("inline source: hard link %q to %q: %w", name, src, err)
			}
			if st.Bytes > lim.Bytes {
				return st, fmt.Errorf("inline source unpacks to more than %d MiB", lim.Bytes>>20)
			}
			st.Files++
		case tar.TypeSymlink:
			if hdr.Linkname == "" || path.IsAbs(hdr.Linkname) || filepath.IsAbs(hdr.Linkname) {
				return st, fmt.Errorf("inline source: symlink %q points to the absolute path %q; only relative links inside the archive are allowed", name, hdr.Linkname)
			}
			if resolved := path.Join(path.Dir(name), hdr.Linkname); resolved == ".." || strings.HasPrefix(resolved, "../") {
				return st, fmt.Errorf("inline source: symlink %q points to %q, outside the archive", name, hdr.Linkname)
			}
			links = append(links, link{name, hdr.Linkname})
			linkNames[name] = true
		default:
			return st, fmt.Errorf("inline source: entry %q has unsupported type %q (only files, directories and symlinks)", name, string(hdr.Typeflag))
		}
	}
	for _, l := range links {
		if err := checkParents(root, l.name); err != nil {
			return st, err
		}
		if err := root.MkdirAll(path.Dir(l.name), 0o755); err != nil {
			return st, fmt.Errorf("inline source: %w", err)
		}
		if err := root.Symlink(filepath.FromSlash(l.target), l.name); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return st, fmt.Errorf("inline source: symlink %q clashes with a directory of the same name", l.name)
			}
			return st, fmt.Errorf("inline source: symlink %q: %w", l.name, err)
		}
		st.Symlinks++
	}
	// Chains of links can escape even when each alone looks fine ("a/b -> .." and
	// "c -> a/b/.."): the root resolves every link now that all exist, and refuses to leave dir.
	for _, l := range links {
		if _, err := root.Stat(l.name); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return st, fmt.Errorf("inline source: symlink %q -> %q does not resolve to a file inside the source", l.name, l.target)
			}
			return st, fmt.Errorf("inline source: symlink %q -> %q resolves outside the source: %w", l.name, l.target, err)
		}
	}
	return st, nil
}

// cleanEntryName validates a tar entry name and returns it cleaned, slash separated, relative.
func cleanEntryName(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("inline source: an entry has an empty name")
	}
	if strings.ContainsRune(name, 0) || strings.Contains(name, `\`) {
		return "", fmt.Errorf("inline source: entry name %q holds a NUL or backslash", name)
	}
	if path.IsAbs(name) || filepath.IsAbs(name) || filepath.VolumeName(name) != "" {
		return "", fmt.Errorf("inline source: entry %q has an absolute path; archive paths must be relative", name)
	}
	for part := range strings.SplitSeq(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("inline source: entry %q contains '..'; archive paths must stay inside the archive", name)
		}
	}
	return path.Clean(name), nil
}

// checkParents refuses an entry whose parent path runs through anything but real directories,
// so the refusal names the entry rather than being the root's "path escapes" error.
func checkParents(root *os.Root, name string) error {
	cur := ""
	for part := range strings.SplitSeq(path.Dir(name), "/") {
		if part == "." {
			continue
		}
		cur = path.Join(cur, part)
		fi, err := root.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // made by MkdirAll; nothing deeper can exist yet
		}
		if err != nil {
			return fmt.Errorf("inline source: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("inline source: entry %q would be written through %q, which is not a directory", name, cur)
		}
	}
	return nil
}

// writeFile creates a regular file that must not exist yet, copying at most limit bytes (one
// more is read, so the caller sees the cap exceeded).
func writeFile(root *os.Root, name string, r io.Reader, perm fs.FileMode, limit int64) (int64, error) {
	if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
		return 0, err
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, (perm&0o755)|0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, io.LimitReader(r, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// copyHardLink copies a regular file of the archive unpacked earlier to name.
func copyHardLink(root *os.Root, src, name string, limit int64) (int64, error) {
	if err := checkParents(root, src); err != nil {
		return 0, err
	}
	fi, err := root.Lstat(src)
	if err != nil {
		return 0, fmt.Errorf("its target must be a file earlier in the archive: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("its target is not a regular file")
	}
	f, err := root.Open(src)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return writeFile(root, name, f, fi.Mode().Perm(), limit)
}

// ResolvesInside resolves p through every symlink and refuses a result outside root, or none:
// for trees that were not unpacked through a root, such as a git checkout, whose links the
// repository chose.
func ResolvesInside(root, p string) error {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return err
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return fmt.Errorf("does not resolve to a file inside the source: %w", err)
	}
	rel, err := filepath.Rel(realRoot, resolved)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return fmt.Errorf("resolves outside the source")
	}
	return nil
}
