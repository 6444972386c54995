package image

import (
	"archive/tar"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// hostProgram returns a dynamically linked program of this machine and the files ldd says it
// loads (interpreter included), as real ELF test material.
func hostProgram(t *testing.T) (string, []string) {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the link checks are exercised on linux/amd64 hosts")
	}
	prog, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	prog, _ = filepath.EvalSymlinks(prog)
	out, err := exec.CommandContext(t.Context(), "ldd", prog).Output()
	if err != nil {
		t.Skipf("ldd %s: %v", prog, err)
	}
	var libs []string
	for line := range strings.Lines(string(out)) {
		for f := range strings.FieldsSeq(line) {
			if strings.HasPrefix(f, "/") {
				libs = append(libs, f)
			}
		}
	}
	if len(libs) < 2 {
		t.Skipf("ldd found no libraries for %s:\n%s", prog, out)
	}
	return prog, libs
}

func TestCheckLinksFindsMissingLibraries(t *testing.T) {
	prog, libs := hostProgram(t)
	f := NewFiles()
	if err := f.AddHostFile("usr/bin/git", 0o755, prog); err != nil {
		t.Fatal(err)
	}
	err := CheckLinks("amd64", f)
	if err == nil {
		t.Fatal("a dynamically linked git alone in an image passed the check")
	}
	for _, want := range []string{"interpreter /lib64/ld-linux-x86-64.so.2", "needs libc.so.6", "needs libz.so.1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	if err := CheckLinks("arm64", f); err == nil || !strings.Contains(err.Error(), "is built for EM_X86_64") {
		t.Errorf("an amd64 program in an arm64 image: %v", err)
	}

	// With every library where ldd found it, laid out as the host has it (sonames as symbolic
	// links to versioned files, the interpreter through /lib64), the check passes.
	for _, lib := range libs {
		if err := addHostPath(f, lib); err != nil {
			t.Fatal(err)
		}
	}
	if err := CheckLinks("amd64", f); err != nil {
		t.Fatal(err)
	}
}

// addHostPath adds a host file to f at the same path, recreating the symbolic links on the way.
func addHostPath(f *Files, p string) error {
	for range 10 {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			if _, ok := f.Lookup(p); ok {
				return nil
			}
			return f.AddHostFile(p, 0o755, p)
		}
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		if _, ok := f.Lookup(p); !ok {
			if err := f.Add(Entry{Path: p, Type: tar.TypeSymlink, Mode: 0o777, Linkname: target}); err != nil {
				return err
			}
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = target
	}
	return nil
}

func TestResolveFollowsLinksInsideTheImage(t *testing.T) {
	f := NewFiles()
	for _, e := range []Entry{
		{Path: "usr/lib/x86_64-linux-gnu/libz.so.1.2.13", Type: tar.TypeReg, Mode: 0o644, Data: []byte("z")},
		{Path: "usr/lib/x86_64-linux-gnu/libz.so.1", Type: tar.TypeSymlink, Linkname: "libz.so.1.2.13"},
		{Path: "lib64/ld.so", Type: tar.TypeSymlink, Linkname: "/usr/lib/x86_64-linux-gnu/libz.so.1"},
		{Path: "lib", Type: tar.TypeSymlink, Linkname: "usr/lib"},
		{Path: "loop", Type: tar.TypeSymlink, Linkname: "loop"},
		{Path: "dangling", Type: tar.TypeSymlink, Linkname: "../../nowhere"},
	} {
		if err := f.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	v := view{f}
	for _, p := range []string{"/lib64/ld.so", "lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1"} {
		e, err := v.resolve(p)
		if err != nil || e.Path != "usr/lib/x86_64-linux-gnu/libz.so.1.2.13" {
			t.Errorf("resolve(%s) = %q, %v", p, e.Path, err)
		}
	}
	for _, p := range []string{"loop", "dangling", "lib/missing.so", "usr/lib/x86_64-linux-gnu/libz.so.1/x"} {
		if e, err := v.resolve(p); err == nil {
			t.Errorf("resolve(%s) = %q, want an error", p, e.Path)
		}
	}
}
