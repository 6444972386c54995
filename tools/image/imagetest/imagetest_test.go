package imagetest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	Main()
	os.Exit(m.Run())
}

// probe reports what a program inside the image sees.
const probe = `package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	fmt.Printf("uid=%d gid=%d groups=%v\n", os.Getuid(), os.Getgid(), must(os.Getgroups()))
	fmt.Printf("env=%s\n", strings.Join(os.Environ(), ","))
	wd, _ := os.Getwd()
	fmt.Printf("wd=%s\n", wd)
	fmt.Printf("write-root=%v\n", os.WriteFile("/planted", nil, 0o644) == nil)
	fmt.Printf("write-tmp=%v\n", os.WriteFile("/tmp/made-inside", []byte("x"), 0o644) == nil)
	_, err := os.Stat("/dev/null")
	fmt.Printf("devnull=%v\n", err == nil)
	_, err = os.Stat("/proc/self/status")
	fmt.Printf("proc=%v\n", err == nil)
}

func must[T any](v T, _ error) T { return v }
`

func TestRunIsolatesLikeAPod(t *testing.T) {
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and this test cannot run: %v", err)
		}
		t.Skip(err)
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(probe), 0o644); err != nil {
		t.Fatal(err)
	}
	rootfs := t.TempDir()
	for _, d := range []string{"tmp", "dev", "proc", "bin"} {
		if err := os.Mkdir(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.CommandContext(t.Context(), "go", "build", "-o", filepath.Join(rootfs, "bin", "probe"), "main.go")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}
	tmp := t.TempDir()
	if err := os.Chmod(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	out, _, err := Run(context.Background(), Spec{
		Rootfs: rootfs, Tmp: tmp, User: "65532:65532", WorkingDir: "/tmp",
		Env: []string{"PATH=/bin", "HOME=/tmp"}, Args: []string{"probe"},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{
		"uid=65532 gid=65532 groups=[]", "env=PATH=/bin,HOME=/tmp\n", "wd=/tmp",
		"write-root=false", "write-tmp=true", "devnull=true", "proc=true",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the probe did not report %q:\n%s", want, got)
		}
	}
	if _, err := os.Stat(filepath.Join(tmp, "made-inside")); err != nil {
		t.Errorf("the write to /tmp did not reach the test's directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(rootfs, "planted")); err == nil {
		t.Error("the read-only root was written")
	}
	// Nothing stays mounted on the host.
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), rootfs) {
		t.Errorf("a mount under %s leaked to the host", rootfs)
	}
	if _, _, err := Run(context.Background(), Spec{Rootfs: rootfs, Tmp: tmp, User: "65532:65532", Env: []string{"PATH=/bin"}, Args: []string{"missing"}}); err == nil {
		t.Error("running a program the image lacks succeeded")
	}
}
