package jobrun

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

// Limits of an inline archive once unpacked. The orchestrator caps the compressed archive at
// 16 MiB; these bound what a small, highly compressible archive can expand to. Variables only
// so tests can lower them.
var (
	maxArchiveBytes   int64 = 256 << 20
	maxArchiveEntries       = 20000
)

// archiveStats describes an unpacked archive for the log.
type archiveStats struct {
	Files, Dirs, Symlinks int
	Bytes                 int64
}

// extractArchive unpacks a gzip-compressed tar into dir, which must exist and be empty.
//
// The archive comes from whoever can create deployments, so it is treated as hostile: it must
// not write outside dir, not even through a symlink it planted itself. Therefore:
//   - entry names must be relative and must not contain "..";
//   - nothing is ever written through a symlink: every parent of an entry must be a real
//     directory, and symlinks are created only after all files and directories;
//   - a symlink's target must be relative, and after all links exist each must resolve (through
//     any chain of links) to a path inside dir; an escaping or dangling link is refused;
//   - hard links are copied from a regular file extracted earlier, never linked to outside files;
//   - devices, FIFOs and other special entries are refused; ownership is ignored and modes are
//     reduced to rwx bits without setuid/setgid/sticky;
//   - the unpacked size and the number of entries are capped (gzip bombs).
func extractArchive(data []byte, dir string) (archiveStats, error) {
	var st archiveStats
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return st, fmt.Errorf("inline source is not gzip data: %w", err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	type link struct{ name, target string }
	var links []link
	seen := map[string]bool{}
	linkNames := map[string]bool{} // symlinks are created last, but nothing may be written below one
	for entries := 0; ; entries++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("inline source is not a valid tar archive: %w", err)
		}
		if entries >= maxArchiveEntries {
			return st, fmt.Errorf("inline source has more than %d entries", maxArchiveEntries)
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
		target := filepath.Join(dir, filepath.FromSlash(name))
		if err := checkParents(dir, name); err != nil {
			return st, err
		}
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			if linkNames[p] {
				return st, fmt.Errorf("inline source: entry %q would be written through the symlink %q", name, p)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return st, fmt.Errorf("inline source: %w", err)
			}
			st.Dirs++
		case tar.TypeReg, tar.TypeGNUSparse: // the reader reports old-style TypeRegA as TypeReg
			if st.Bytes+hdr.Size > maxArchiveBytes {
				return st, fmt.Errorf("inline source unpacks to more than %d MiB", maxArchiveBytes>>20)
			}
			n, err := writeFile(target, tr, hdr.FileInfo().Mode().Perm(), maxArchiveBytes-st.Bytes)
			st.Bytes += n
			if err != nil {
				return st, fmt.Errorf("inline source: %s: %w", name, err)
			}
			st.Files++
		case tar.TypeLink:
			src, err := cleanEntryName(hdr.Linkname)
			if err != nil || src == "." {
				return st, fmt.Errorf("inline source: hard link %q points to %q, outside the archive", name, hdr.Linkname)
			}
			n, err := copyHardLink(dir, src, target, maxArchiveBytes-st.Bytes)
			st.Bytes += n
			if err != nil {
				return st, fmt.Errorf("inline source: hard link %q to %q: %w", name, src, err)
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
	// Links last, so no entry was ever written through one.
	for _, l := range links {
		if err := checkParents(dir, l.name); err != nil {
			return st, err
		}
		if err := os.Symlink(filepath.FromSlash(l.target), filepath.Join(dir, filepath.FromSlash(l.name))); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return st, fmt.Errorf("inline source: symlink %q clashes with a directory of the same name", l.name)
			}
			return st, fmt.Errorf("inline source: symlink %q: %w", l.name, err)
		}
		st.Symlinks++
	}
	// Chains of links can escape even when each link alone looks fine ("a/b -> .." and
	// "c -> a/b/.."), so check the real resolution of every link now that all exist.
	for _, l := range links {
		if err := checkInside(dir, filepath.Join(dir, filepath.FromSlash(l.name))); err != nil {
			return st, fmt.Errorf("inline source: symlink %q -> %q: %w", l.name, l.target, err)
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
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("inline source: entry %q contains '..'; archive paths must stay inside the archive", name)
		}
	}
	return path.Clean(name), nil
}

// checkParents refuses an entry whose parent path runs through anything but real directories.
func checkParents(dir, name string) error {
	cur := dir
	parts := strings.Split(path.Dir(name), "/")
	for _, part := range parts {
		if part == "." {
			continue
		}
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // created by MkdirAll below; nothing deeper can exist yet
		}
		if err != nil {
			return fmt.Errorf("inline source: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("inline source: entry %q would be written through %q, which is not a directory", name, strings.TrimPrefix(cur, dir+string(filepath.Separator)))
		}
	}
	return nil
}

// writeFile creates a regular file that must not exist yet, copying at most limit bytes.
func writeFile(target string, r io.Reader, perm fs.FileMode, limit int64) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, (perm&0o755)|0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, io.LimitReader(r, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > limit {
		err = fmt.Errorf("the archive unpacks to more than %d MiB", maxArchiveBytes>>20)
	}
	return n, err
}

// copyHardLink copies an already extracted regular file of the archive to target.
func copyHardLink(dir, src, target string, limit int64) (int64, error) {
	if err := checkParents(dir, src); err != nil {
		return 0, err
	}
	srcPath := filepath.Join(dir, filepath.FromSlash(src))
	fi, err := os.Lstat(srcPath)
	if err != nil {
		return 0, fmt.Errorf("its target must be a file earlier in the archive: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("its target is not a regular file")
	}
	f, err := os.Open(srcPath)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return writeFile(target, f, fi.Mode().Perm(), limit)
}

// checkInside resolves p through every symlink and refuses results outside root (or dangling).
func checkInside(root, p string) error {
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
