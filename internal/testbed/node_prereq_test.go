package testbed

import (
	"fmt"
	"strings"
	"testing"
)

// A machine that lacks what the node needs gets an error naming each missing program with the
// Debian package that installs it, and the command that installs them.
func TestNodePrerequisitesNameWhatIsMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // containerd, ctr, nsenter, unshare and mount live in /usr/bin
	err := checkNodePrerequisites(t.TempDir())
	if !IsNodeUnavailable(err) {
		t.Fatalf("err = %v, want a NodeUnavailableError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"containerd (Debian package containerd)", "nsenter (Debian package util-linux)", "make testbed-build",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not name %q:\n%s", want, msg)
		}
	}
	// One entry per package, not per program.
	if n := strings.Count(msg, "Debian package containerd)"); n != 1 {
		t.Errorf("containerd named %d times:\n%s", n, msg)
	}
}

// recordingTB records what RequireNode does instead of ending the test. RequireNode calls only
// these methods; any other would panic on the nil embedded TB.
type recordingTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordingTB) Helper()                           {}
func (r *recordingTB) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *recordingTB) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }
func (r *recordingTB) Fatal(args ...any)                 { r.failed = fmt.Sprint(args...) }

// Without a node the machine cannot run, RequireNode skips with the reason; under CI=true it
// fails; on a test bed started without Options.Node it fails (a mistake in the test).
func TestRequireNode(t *testing.T) {
	unavailable := &NodeUnavailableError{Missing: []string{"root (run the tests as root)"}}
	for _, tc := range []struct {
		name       string
		ci         string
		c          *Cluster
		skip, fail string
	}{
		{name: "node runs", c: &Cluster{Node: true}},
		{name: "machine cannot", c: &Cluster{nodeErr: unavailable}, skip: "run the tests as root"},
		{name: "machine cannot, CI", ci: "true", c: &Cluster{nodeErr: unavailable}, fail: "run the tests as root"},
		{name: "not asked for", c: &Cluster{}, fail: "Options{Node: true}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(CIEnv, tc.ci)
			r := &recordingTB{}
			RequireNode(r, tc.c)
			if (tc.skip == "") != (r.skipped == "") || !strings.Contains(r.skipped, tc.skip) {
				t.Errorf("skipped %q, want %q", r.skipped, tc.skip)
			}
			if (tc.fail == "") != (r.failed == "") || !strings.Contains(r.failed, tc.fail) {
				t.Errorf("failed %q, want %q", r.failed, tc.fail)
			}
		})
	}
}
