// Package sourcearchive packs a directory of Terraform or OpenTofu configuration into the
// gzip-compressed tar that an inline deployment source carries (api.InlineSource).
//
// The archive is deterministic: the same files give the same bytes (sorted entries, fixed times,
// no owners, modes reduced to 0644/0755), so a deployment's source can be compared and cached.
// What must not travel is left out: .terraform/ (providers and modules the job runner downloads
// itself), .git/, and local state files, which may hold secrets and which the state storage
// replaces; and what the directory's .outpostignore (else .terraformignore) names, in .gitignore
// syntax. What the job runner would refuse is refused here, before anything is uploaded:
// symlinks that leave the directory (or dangle), and special files.
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
	"time"
)

// MaxBytes is the largest archive a deployment can carry: the API takes at most 16 MiB of JSON
// to create a deployment, and base64 makes the archive a third larger.
const MaxBytes = 12 << 20

// skippedDirs are directories that are never packed, at any depth.
var skippedDirs = map[string]bool{".terraform": true, ".git": true}

// skippedFile reports whether a file is a local state file (terraform.tfstate,
// terraform.tfstate.backup, or any *.tfstate): the deployment's state lives in its state
// storage, and a local one may hold secrets.
func skippedFile(name string) bool {
	return strings.HasSuffix(name, ".tfstate") || strings.HasSuffix(name, ".tfstate.backup")
}

// epoch is every entry's modification time, so that archives do not depend on when files were
// touched.
var epoch = time.Unix(0, 0).UTC()

// Archive is a packed directory.
type Archive struct {
	// Data is the gzip-compressed tar.
	Data []byte
	// Files, Dirs and Symlinks count the entries; Bytes is the files' size before compression.
	Files, Dirs, Symlinks int
	Bytes                 int64
	// Skipped lists what was left out, as slash-separated paths relative to the directory
	// (directories end in "/"): what is never packed, and what the ignore file names.
	Skipped []string
	// IgnoreFile is the ignore file that was read (OutpostIgnoreFile or TerraformIgnoreFile), ""
	// when the directory has none.
	IgnoreFile string
	// Largest are the largest files packed, largest first (at most five), for a message about
	// an archive that is too large.
	Largest []File
}

// File is a packed file and its size.
type File struct {
	Name string
	Size int64
}

// largestKept is how many of the largest files an Archive names.
const largestKept = 5

// Pack packs dir. It fails, naming the path at fault, on a symlink that leaves dir, dangles or
// points into a skipped directory, and on anything but files, directories and symlinks.
func Pack(dir string) (*Archive, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("source directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("source %s is not a directory", dir)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("source directory: %w", err)
	}
	ignore, err := readIgnoreFile(realRoot)
	if err != nil {
		return nil, err
	}
	p := &packer{root: realRoot, a: &Archive{}, ignore: ignore}
	if ignore != nil {
		p.a.IgnoreFile = ignore.file
	}
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	p.tw = tar.NewWriter(gz)
	// WalkDir visits entries in lexical order and never follows symlinks, which is what makes
	// the archive deterministic and keeps it inside the directory.
	if err := filepath.WalkDir(realRoot, p.visit); err != nil {
		return nil, err
	}
	if err := p.tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	p.a.Data = buf.Bytes()
	return p.a, nil
}

type packer struct {
	root   string
	tw     *tar.Writer
	a      *Archive
	ignore *ignoreRules
}

func (p *packer) visit(full string, d fs.DirEntry, walkErr error) error {
	if walkErr != nil {
		return walkErr
	}
	if full == p.root {
		return nil
	}
	rel, err := filepath.Rel(p.root, full)
	if err != nil {
		return err
	}
	name := filepath.ToSlash(rel)
	// Tar names are slash separated; a backslash would mean a separator on Windows and a
	// character here, so the job runner refuses such names, and so does Pack, before uploading.
	if strings.ContainsRune(name, '\\') {
		return fmt.Errorf("%s has a backslash in its name, which the job runner refuses; rename it", name)
	}
	if p.ignore.ignored(name, d.IsDir()) {
		if d.IsDir() {
			p.a.Skipped = append(p.a.Skipped, name+"/")
			return filepath.SkipDir
		}
		p.a.Skipped = append(p.a.Skipped, name)
		return nil
	}
	switch typ := d.Type(); {
	case d.IsDir():
		if skippedDirs[d.Name()] {
			p.a.Skipped = append(p.a.Skipped, name+"/")
			return filepath.SkipDir
		}
		p.a.Dirs++
		return p.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: epoch})
	case typ.IsRegular():
		if skippedFile(d.Name()) {
			p.a.Skipped = append(p.a.Skipped, name)
			return nil
		}
		return p.file(full, name)
	case typ&fs.ModeSymlink != 0:
		return p.symlink(full, name)
	default:
		return fmt.Errorf("%s is a %s; only files, directories and symlinks can be packed", name, kind(typ))
	}
}

func (p *packer) file(full, name string) error {
	f, err := os.Open(full)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	mode := int64(0o644)
	if fi.Mode().Perm()&0o111 != 0 {
		mode = 0o755
	}
	if err := p.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: fi.Size(), ModTime: epoch}); err != nil {
		return err
	}
	n, err := io.Copy(p.tw, f)
	if err != nil {
		return fmt.Errorf("pack %s (did it change while being read?): %w", name, err)
	}
	p.a.Files++
	p.a.Bytes += n
	p.a.noteSize(name, n)
	return nil
}

// noteSize keeps name among the largest files when it is one of them.
func (a *Archive) noteSize(name string, size int64) {
	i := len(a.Largest)
	for i > 0 && a.Largest[i-1].Size < size {
		i--
	}
	if i >= largestKept {
		return
	}
	a.Largest = append(a.Largest, File{})
	copy(a.Largest[i+1:], a.Largest[i:])
	a.Largest[i] = File{Name: name, Size: size}
	if len(a.Largest) > largestKept {
		a.Largest = a.Largest[:largestKept]
	}
}

// symlink packs a link whose target resolves inside the directory. The link is kept as a link
// (relative), so the job runner lays out the same tree; an absolute target inside the directory
// is rewritten relative to the link.
func (p *packer) symlink(full, name string) error {
	target, err := os.Readlink(full)
	if err != nil {
		return err
	}
	resolved, err := filepath.EvalSymlinks(full)
	if err != nil {
		return fmt.Errorf("symlink %s points to %s, which does not exist; remove the link or the file it names", name, target)
	}
	in, err := filepath.Rel(p.root, resolved)
	if err != nil || in == ".." || strings.HasPrefix(in, ".."+string(filepath.Separator)) {
		return fmt.Errorf("symlink %s points to %s, outside %s; the job runner only gets this directory, so copy the files in instead of linking them", name, target, p.root)
	}
	for _, part := range strings.Split(filepath.ToSlash(in), "/") {
		if skippedDirs[part] {
			return fmt.Errorf("symlink %s points into %s, which is not packed (%s/ is never uploaded)", name, filepath.ToSlash(in), part)
		}
	}
	link := filepath.ToSlash(target)
	if filepath.IsAbs(target) {
		parent, err := filepath.EvalSymlinks(filepath.Dir(full))
		if err != nil {
			return err
		}
		r, err := filepath.Rel(parent, resolved)
		if err != nil {
			return err
		}
		link = filepath.ToSlash(r)
	}
	// The job runner checks each link on its own before it follows chains of them, so a link
	// must not leave the directory even on paper.
	if j := path.Join(path.Dir(name), link); j == ".." || strings.HasPrefix(j, "../") {
		return fmt.Errorf("symlink %s points to %s, which leaves the directory before coming back; point it at %s directly", name, target, filepath.ToSlash(in))
	}
	p.a.Symlinks++
	return p.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: link, Mode: 0o777, ModTime: epoch})
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// ErrTooLarge is returned by Check for an archive beyond MaxBytes.
var ErrTooLarge = errors.New("source archive too large")

// Check refuses an archive the API would refuse for its size, naming the largest files and
// saying what to do instead.
func (a *Archive) Check() error {
	if len(a.Data) <= MaxBytes {
		return nil
	}
	largest := make([]string, len(a.Largest))
	for i, f := range a.Largest {
		largest[i] = fmt.Sprintf("%s (%s)", f.Name, mib(f.Size))
	}
	return fmt.Errorf("%w: %d bytes compressed, more than the %d MiB a deployment can carry; the largest files: %s. "+
		"Leave files out with a %s in the directory (.gitignore syntax; a %s is read when there is none), "+
		"or deploy from git (--git URL --ref R --path P)", ErrTooLarge, len(a.Data), MaxBytes>>20, strings.Join(largest, ", "),
		OutpostIgnoreFile, TerraformIgnoreFile)
}

// mib is a size in MiB with one decimal, below one MiB in KiB, below one KiB in bytes.
func mib(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}
