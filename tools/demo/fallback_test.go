package demo

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// Where the real node cannot run, the demo says why and falls back to the process executor, whose
// test bed needs no node. Here containerd is hidden from the test bed.
func TestDemoFallsBackWithoutNode(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: starts a test bed")
	}
	if _, err := testbed.BinDir(); err != nil {
		t.Fatalf("test bed binaries: %v", err)
	}
	// This machine as if Debian's containerd package were not installed: PATH holds every
	// program of PATH but containerd's.
	path := t.TempDir()
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "containerd") || e.Name() == "ctr" {
				continue
			}
			_ = os.Symlink(filepath.Join(dir, e.Name()), filepath.Join(path, e.Name())) // the first of a name wins, as on PATH
		}
	}
	t.Setenv("PATH", path)
	for _, p := range []string{"/usr/sbin/containerd", "/sbin/containerd", "/usr/local/sbin/containerd"} {
		if _, err := os.Stat(p); err == nil {
			t.Skipf("skipped: containerd is at %s, which the test bed finds without PATH", p)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	c := Config{Repo: repoRoot(t), Dir: t.TempDir(), Out: &out}
	c.Defaults()
	t.Cleanup(func() { _ = Down(context.Background(), c) })
	s := &stepper{out: &out, of: 1}
	tc, err := startTestbed(ctx, &c, s)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if c.Executor != ExecutorProcess || tc.Node || !tc.Jobs {
		t.Errorf("want the process executor on a test bed with kwok and no node; got executor %q, node %v, jobs %v", c.Executor, tc.Node, tc.Jobs)
	}
	for _, want := range []string{"cannot run a real node", "containerd (Debian package containerd)", "falling back to EXECUTOR=process", "built outpost-agent"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
