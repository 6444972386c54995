package testbed

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A test bed that cannot start must say which component failed and why, without anyone having to
// find its log file.
func TestStartFailureShowsComponentLog(t *testing.T) {
	skipUnderShort(t)
	built, err := findBinaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range binaryNames {
		if err := os.Symlink(filepath.Join(built, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	broken := filepath.Join(dir, "kube-apiserver")
	_ = os.Remove(broken)
	script := "#!/bin/sh\necho 'Error: invalid argument \"bogus\" for --secure-port' >&2\nexit 1\n"
	if err := os.WriteFile(broken, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(BinDirEnv, dir)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{})
	if err == nil {
		_ = c.Stop()
		t.Fatal("Start succeeded with a broken kube-apiserver")
	}
	msg := err.Error()
	t.Logf("Start failed as expected:\n%s", msg)
	for _, want := range []string{"kube-apiserver exited", `invalid argument "bogus" for --secure-port`, "kube-apiserver.log"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not contain %q:\n%s", want, msg)
		}
	}
	// The error keeps the logs; clean up what this test made.
	if i := strings.LastIndex(msg, "kept in "); i >= 0 {
		kept := strings.TrimSuffix(strings.TrimSpace(msg[i+len("kept in "):]), ")")
		if strings.HasPrefix(filepath.Base(kept), tempDirPrefix) {
			_ = os.RemoveAll(kept)
		}
	}
}

func TestMissingBinariesSaysHowToBuild(t *testing.T) {
	t.Setenv(BinDirEnv, t.TempDir())
	_, err := Start(t.Context(), Options{})
	if !IsMissingBinaries(err) {
		t.Fatalf("got %v, want a MissingBinariesError", err)
	}
	if !strings.Contains(err.Error(), "run `make testbed-build`") {
		t.Errorf("error does not say how to build the binaries: %v", err)
	}
}

// A test bed without Jobs is etcd and the API server only; Stop leaves no process and no file.
func TestStartStopWithoutJobs(t *testing.T) {
	skipUnderShort(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("API server ready %s after start", time.Since(start).Round(time.Millisecond))
	if len(c.procs) != 2 {
		t.Errorf("started %d processes, want 2 (etcd, kube-apiserver)", len(c.procs))
	}
	if _, err := c.Client().CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range c.procs {
		if processAlive(p.cmd.Process.Pid) {
			t.Errorf("%s (pid %d) still runs after Stop", p.name, p.cmd.Process.Pid)
		}
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists after Stop (err %v)", c.Dir, err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}
