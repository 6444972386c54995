package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
)

// elfArch maps GOARCH to the ELF machine and the Debian multiarch triplet ld.so searches.
var elfArch = map[string]struct {
	machine elf.Machine
	triplet string
}{
	"amd64": {elf.EM_X86_64, "x86_64-linux-gnu"},
	"arm64": {elf.EM_AARCH64, "aarch64-linux-gnu"},
}

// view is the file system that layers make together, bottom first; an upper layer's entry hides
// a lower one's.
type view []*Files

func (v view) lookup(p string) (Entry, bool) {
	for i := len(v) - 1; i >= 0; i-- {
		if e, ok := v[i].Lookup(p); ok {
			return e, true
		}
	}
	return Entry{}, false
}

// resolve follows symbolic links (in the last element and in directories on the way) the way the
// kernel does inside the image's root, and returns the entry at the end.
func (v view) resolve(p string) (Entry, error) {
	todo := strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/")
	var done []string
	for hops := 0; len(todo) > 0; {
		elem := todo[0]
		todo = todo[1:]
		cur := path.Join(append(done, elem)...)
		e, ok := v.lookup(cur)
		if !ok {
			return Entry{}, fmt.Errorf("%s does not exist", "/"+cur)
		}
		if e.Type != tar.TypeSymlink {
			if len(todo) > 0 && e.Type != tar.TypeDir {
				return Entry{}, fmt.Errorf("%s is not a directory", "/"+cur)
			}
			done = append(done, elem)
			if len(todo) == 0 {
				return e, nil
			}
			continue
		}
		if hops++; hops > 40 {
			return Entry{}, fmt.Errorf("too many levels of symbolic links at %s", "/"+cur)
		}
		target := e.Linkname
		if !path.IsAbs(target) {
			target = path.Join(append([]string{"/"}, append(done, target)...)...)
		}
		done = nil
		todo = append(strings.Split(strings.Trim(path.Clean(target), "/"), "/"), todo...)
		if todo[0] == "" {
			todo = todo[1:]
		}
	}
	return Entry{Type: tar.TypeDir}, nil // the root
}

// CheckLinks checks every ELF file in the image that the layers make (bottom first) for the CPU
// architecture goarch ("amd64", "arm64"): it must be built for that architecture, and a
// dynamically linked one must find its program interpreter and every library it needs
// (DT_NEEDED) in the image, searching its RUNPATH and then the directories ld.so searches when
// there is no ld.so.cache (the multiarch directories, /lib and /usr/lib). So a missing shared
// library fails the build for every architecture, even one this machine cannot run. Libraries
// loaded with dlopen are not seen. The error lists every problem.
func CheckLinks(goarch string, layers ...*Files) error {
	arch, ok := elfArch[goarch]
	if !ok {
		return fmt.Errorf("no ELF machine known for architecture %q", goarch)
	}
	v := view(layers)
	seen := map[string]bool{}
	var problems []string
	for i := len(v) - 1; i >= 0; i-- {
		for _, p := range v[i].Paths() {
			e, _ := v[i].Lookup(p)
			if seen[p] || e.Type != tar.TypeReg {
				seen[p] = true
				continue
			}
			seen[p] = true
			problems = append(problems, v.checkELF(e, arch.machine, arch.triplet)...)
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return fmt.Errorf("%d dynamic linking problem(s) for %s:\n  %s", len(problems), goarch, strings.Join(problems, "\n  "))
	}
	return nil
}

func (v view) checkELF(e Entry, machine elf.Machine, triplet string) []string {
	f, err := openELF(e)
	if err != nil || f == nil {
		if err != nil {
			return []string{fmt.Sprintf("/%s: %v", e.Path, err)}
		}
		return nil
	}
	defer func() { _ = f.Close() }()
	if f.Machine != machine {
		return []string{fmt.Sprintf("/%s is built for %s, not %s", e.Path, f.Machine, machine)}
	}
	var problems []string
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		interp, err := io.ReadAll(prog.Open())
		if err != nil {
			return []string{fmt.Sprintf("/%s: reading its interpreter: %v", e.Path, err)}
		}
		ip := strings.TrimRight(string(interp), "\x00")
		if r, err := v.resolve(ip); err != nil || r.Type != tar.TypeReg {
			problems = append(problems, fmt.Sprintf("/%s: interpreter %s: %v", e.Path, ip, orNotFile(err)))
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return append(problems, fmt.Sprintf("/%s: %v", e.Path, err))
	}
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := f.DynString(tag)
		for _, val := range vals {
			for d := range strings.SplitSeq(val, ":") {
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", path.Dir("/"+e.Path)))
			}
		}
	}
	dirs = append(dirs, "/lib/"+triplet, "/usr/lib/"+triplet, "/lib", "/usr/lib")
	for _, lib := range needed {
		if !v.findLibrary(lib, dirs) {
			problems = append(problems, fmt.Sprintf("/%s needs %s, found in none of %s", e.Path, lib, strings.Join(dirs, ", ")))
		}
	}
	return problems
}

func (v view) findLibrary(lib string, dirs []string) bool {
	if strings.Contains(lib, "/") {
		r, err := v.resolve(lib)
		return err == nil && r.Type == tar.TypeReg
	}
	for _, d := range dirs {
		if r, err := v.resolve(path.Join(d, lib)); err == nil && r.Type == tar.TypeReg {
			return true
		}
	}
	return false
}

func orNotFile(err error) error {
	if err == nil {
		return errors.New("not a regular file")
	}
	return err
}

// openELF returns nil, nil for a file that is not ELF.
func openELF(e Entry) (*elf.File, error) {
	if e.Source == "" {
		if !bytes.HasPrefix(e.Data, []byte(elf.ELFMAG)) {
			return nil, nil
		}
		return elf.NewFile(bytes.NewReader(e.Data))
	}
	f, err := os.Open(e.Source)
	if err != nil {
		return nil, err
	}
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	_ = f.Close()
	if err != nil || string(magic[:]) != elf.ELFMAG {
		return nil, nil //nolint:nilerr // too short to be ELF
	}
	return elf.Open(e.Source)
}
