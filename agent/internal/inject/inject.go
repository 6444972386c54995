// Package inject is `outpost-agent inject DIR`: the init container of every job pod runs it from
// the agent image to copy the agent binary (which is also the job runner, `outpost-agent job`)
// into DIR, an emptyDir that the pod's main container mounts too. main then runs the job runner
// from there, so main can use any image that has terraform or tofu, with no Outpost binary of its
// own: the way Tekton and Argo inject their entrypoints.
//
// The agent image has no shell and no cp on purpose (nothing to exploit), so the copy is a
// subcommand of the binary itself.
package inject

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// BinaryName is the name of the copy in DIR; the kubernetes executor runs DIR/BinaryName job.
const BinaryName = "outpost-agent"

// Main copies the running executable into the directory named by args and returns the exit
// code: 0 on success, 2 for bad arguments, 1 when the copy failed.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] == "" || args[0][0] == '-' {
		fmt.Fprintln(stderr, "usage: outpost-agent inject DIR\n\nCopies this binary to DIR/"+BinaryName+
			" (the init container of a job pod runs it, so that the main container can run the job runner from DIR).")
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "outpost-agent inject: cannot find this binary: %v\n", err)
		return 1
	}
	n, err := Copy(self, args[0])
	if err != nil {
		fmt.Fprintf(stderr, "outpost-agent inject: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "outpost-agent inject: copied the job runner to %s (%d bytes)\n", filepath.Join(args[0], BinaryName), n)
	return 0
}

// Copy copies the file src to dir/BinaryName, executable by everyone (main may run as another
// user than the init container). The copy is written under a temporary name, synced and renamed,
// so main never sees a partial binary, even if the init container is killed and restarted.
func Copy(src, dir string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, fmt.Errorf("the target directory: %w (mount the job pod's emptyDir there)", err)
	}
	if !fi.IsDir() {
		return 0, fmt.Errorf("%s is not a directory", dir)
	}
	tmp, err := os.CreateTemp(dir, "."+BinaryName+"-*")
	if err != nil {
		return 0, fmt.Errorf("create the copy: %w", err)
	}
	n, err := io.Copy(tmp, in)
	err = errors.Join(err, tmp.Chmod(0o755), tmp.Sync(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, BinaryName))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return 0, fmt.Errorf("copy %s to %s: %w", src, dir, err)
	}
	return n, nil
}
