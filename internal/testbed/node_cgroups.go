package testbed

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The real node's cgroups.
//
// The kubelet (cgroupfs driver) puts Pods under its cgroupRoot. Each node gets its own,
// /outpost-testbed-<pid>-<link index>, created in every mounted cgroup hierarchy (the kubelet
// insists that it exists) and removed, with everything the kubelet made under it, when the node
// stops. It sits at the top of each hierarchy rather than under the test binary's own cgroup: on
// cgroup v2 a cgroup that holds processes cannot delegate controllers to children, and a cgroup
// of ours inside someone else's (a terminal's session scope) would keep its owner from removing
// it. The test binary's pid in the name lets a later run remove the cgroups of a run that was
// killed before it could (sweepStaleCgroups).

// cgroupPrefix starts the name of every node cgroup root.
const cgroupPrefix = "outpost-testbed-"

// cgroupMounts returns the mount points of the cgroup hierarchies (v1 and v2) of this machine.
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "36 35 98:0 / /mnt1 rw,noatime master:1 - ext3 /dev/root rw": the filesystem type
		// follows the " - " separator; the mount point is field 5.
		line := sc.Text()
		left, right, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		fstype := strings.Fields(right)
		fields := strings.Fields(left)
		if len(fstype) == 0 || len(fields) < 5 {
			continue
		}
		if fstype[0] == "cgroup" || fstype[0] == "cgroup2" {
			out = append(out, unescapeMountinfo(fields[4]))
		}
	}
	return out, sc.Err()
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of /proc/self/mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// createCgroupRoot creates /name in every cgroup hierarchy and returns the directories made.
func createCgroupRoot(name string) ([]string, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, fmt.Errorf("reading the cgroup mounts: %w", err)
	}
	if len(mounts) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	var dirs []string
	for _, m := range mounts {
		dir := filepath.Join(m, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			_ = removeCgroups(dirs, 0)
			return nil, fmt.Errorf("creating the node's cgroup: %w", err)
		}
		dirs = append(dirs, dir)
	}
	return dirs, nil
}

// removeCgroups removes each directory with every cgroup below it, deepest first. A cgroup can
// only be removed once its last process has exited, and a killed process leaves its cgroup a
// moment after its parent saw it die, so removal is retried for up to wait.
func removeCgroups(dirs []string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		var failed []string
		var lastErr error
		for _, dir := range dirs {
			if err := removeCgroupTree(dir); err != nil {
				failed = append(failed, dir)
				lastErr = err
			}
		}
		if len(failed) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("removing the node's cgroups: %w", lastErr)
		}
		dirs = failed
		time.Sleep(50 * time.Millisecond)
	}
}

func removeCgroupTree(dir string) error {
	var subdirs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			subdirs = append(subdirs, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Deepest first: a cgroup with children cannot be removed. Only directories are removed;
	// the files in a cgroup directory are the kernel's and go with it.
	slices.SortFunc(subdirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, d := range subdirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// sweepStaleCgroups removes the node cgroups of test binaries that died without stopping their
// node. Their processes died with the node's init (the kernel kills a PID namespace with it);
// only the directories remain.
func sweepStaleCgroups() {
	mounts, err := cgroupMounts()
	if err != nil {
		return
	}
	for _, m := range mounts {
		dirs, _ := filepath.Glob(filepath.Join(m, cgroupPrefix+"*"))
		for _, dir := range dirs {
			rest := strings.TrimPrefix(filepath.Base(dir), cgroupPrefix)
			pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
			if err != nil || processAlive(pid) {
				continue
			}
			_ = removeCgroupTree(dir) // fails harmlessly while a process is still inside
		}
	}
}
