// Package imagetest unpacks images (Unpack) and runs programs from an unpacked image the way a
// container runtime would, for tests on a machine without one: in a private mount namespace
// (nothing leaks to the host, even when the test is killed), with the image's root file system
// mounted read-only, a writable directory of the test's at /tmp (as the chart's emptyDir), /dev
// holding null, zero, random and urandom, and /proc; chrooted, as the image's numeric user with
// no supplementary groups (so with no capabilities), with the image's environment and nothing
// else. A missing library, a wrong permission or a write outside /tmp fails the way it would in
// a pod with readOnlyRootFilesystem.
//
// It needs root (mount, chroot). The test binary runs itself as the child that sets this up, so a
// test package using Run must call Main first thing in its TestMain.
package imagetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const childEnv = "OUTPOST_IMAGETEST_CHILD"

// Spec is one program run.
type Spec struct {
	// Rootfs is the unpacked image.
	Rootfs string
	// Tmp is a host directory mounted read-write at /tmp.
	Tmp string
	// User is the image config's user, "uid:gid" (numeric).
	User string
	// Env is the image config's environment.
	Env []string
	// WorkingDir is the image config's working directory ("/" when empty).
	WorkingDir string
	// Args is the program and its arguments; a program without a slash is looked up in the PATH
	// of Env, inside the image.
	Args []string
}

// Available says why Run cannot work here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("running a program inside an unpacked image needs root (mount, chroot)")
	}
	return nil
}

// Run runs spec and returns its standard output and standard error.
func Run(ctx context.Context, spec Spec) (stdout, stderr []byte, err error) {
	if err := Available(); err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = []string{childEnv + "=" + string(b)}
	// Go makes the new mount namespace's root private, so no mount propagates to the host.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s in the image: %w\n%s", strings.Join(spec.Args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), errb.Bytes(), err
}

// Main runs the child side of Run when this process is one, and never returns then; otherwise
// it returns at once.
func Main() {
	raw, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	var spec Spec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fail(126, "bad spec: %v", err)
	}
	if err := child(spec); err != nil {
		fail(126, "%v", err)
	}
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "imagetest: "+format+"\n", args...)
	os.Exit(code)
}

func mount(src, target, fstype string, flags uintptr, data string) error {
	if err := syscall.Mount(src, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", src, target, err)
	}
	return nil
}

func child(s Spec) error {
	root := s.Rootfs
	if err := mount(root, root, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return err
	}
	if err := mount("", root, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
		return err
	}
	if err := mount(s.Tmp, filepath.Join(root, "tmp"), "", syscall.MS_BIND, ""); err != nil {
		return err
	}
	dev := filepath.Join(root, "dev")
	if err := mount("tmpfs", dev, "tmpfs", syscall.MS_NOSUID|syscall.MS_NOEXEC, "mode=755"); err != nil {
		return err
	}
	for _, d := range []string{"null", "zero", "random", "urandom"} {
		if err := os.WriteFile(filepath.Join(dev, d), nil, 0o666); err != nil {
			return err
		}
		if err := mount("/dev/"+d, filepath.Join(dev, d), "", syscall.MS_BIND, ""); err != nil {
			return err
		}
	}
	if err := mount("proc", filepath.Join(root, "proc"), "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return err
	}
	uid, gid, err := parseUser(s.User)
	if err != nil {
		return err
	}
	if err := syscall.Chroot(root); err != nil {
		return fmt.Errorf("chroot %s: %w", root, err)
	}
	wd := s.WorkingDir
	if wd == "" {
		wd = "/"
	}
	if err := syscall.Chdir(wd); err != nil {
		return fmt.Errorf("working directory %s: %w", wd, err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid %d: %w", uid, err)
	}
	if len(s.Args) == 0 {
		return fmt.Errorf("no program to run")
	}
	prog, err := lookPath(s.Args[0], s.Env)
	if err != nil {
		return err
	}
	return syscall.Exec(prog, s.Args, s.Env)
}

func parseUser(u string) (int, int, error) {
	us, gs, ok := strings.Cut(u, ":")
	uid, err1 := strconv.Atoi(us)
	gid, err2 := strconv.Atoi(gs)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("user %q is not numeric uid:gid", u)
	}
	return uid, gid, nil
}

// lookPath finds prog in the PATH of env, inside the chroot, as the user it will run as.
func lookPath(prog string, env []string) (string, error) {
	if strings.Contains(prog, "/") {
		return prog, nil
	}
	path := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	for dir := range strings.SplitSeq(path, ":") {
		p := filepath.Join(dir, prog)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && syscall.Access(p, 1) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in PATH %q of the image", prog, path)
}
