package demo

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A missing prerequisite is a one-line message that says which and how to fix it.
func TestPrerequisiteMessages(t *testing.T) {
	t.Run("no terraform", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		c := Config{CLI: "terraform"}
		_, err := c.cliPath()
		if !IsPrereq(err) || !strings.Contains(err.Error(), "terraform is not on PATH") || !strings.Contains(err.Error(), "install Terraform") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("no tofu", func(t *testing.T) {
		c := Config{CLI: "tofu", TofuPath: "/nonexistent/tofu"}
		_, err := c.cliPath()
		if !IsPrereq(err) || !strings.Contains(err.Error(), "make tools") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("unknown CLI", func(t *testing.T) {
		c := Config{CLI: "pulumi"}
		if _, err := c.cliPath(); !IsPrereq(err) || !strings.Contains(err.Error(), "TF=terraform or TF=tofu") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("port in use", func(t *testing.T) {
		l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		c := Config{Dir: t.TempDir(), OrchestratorAddr: l.Addr().String(), StateAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0"}
		err = checkPorts(t.Context(), c)
		if !IsPrereq(err) || !strings.Contains(err.Error(), l.Addr().String()) || !strings.Contains(err.Error(), "OUTPOST_DEMO_ORCHESTRATOR_ADDR") {
			t.Fatalf("got %v", err)
		}
	})
}

// IsPrereq reports whether err is a missing prerequisite.
func IsPrereq(err error) bool { return errors.Is(err, errPrereq) }

// A demo running with one executor is not switched to the other over it: that takes a test bed
// of another shape and the orchestrator on another address, so the message asks for demo-down.
func TestExecutorSwitchRefused(t *testing.T) {
	c := Config{Dir: t.TempDir(), Executor: ExecutorProcess}
	c.Defaults()
	if err := checkSameExecutor(&c); err != nil {
		t.Fatalf("no demo ran before: %v", err)
	}
	if err := c.recordExecutor(); err != nil {
		t.Fatal(err)
	}
	// A detached test bed whose one process is this test, as `outpost-testbed up` records it.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(c.testbedDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	state := fmt.Sprintf(`{"kubeconfig": "x", "processes": [{"name": "etcd", "pid": %d, "exe": %q}]}`, os.Getpid(), exe)
	if err := os.WriteFile(filepath.Join(c.testbedDir(), "testbed.json"), []byte(state), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkSameExecutor(&c); err != nil {
		t.Fatalf("same executor again: %v", err)
	}
	c.Executor = ExecutorKubernetes
	err = checkSameExecutor(&c)
	if !IsPrereq(err) || !strings.Contains(err.Error(), "EXECUTOR=process is running") || !strings.Contains(err.Error(), "make demo-down") {
		t.Fatalf("got %v", err)
	}
	c.Executor = "docker"
	if err := c.checkExecutor(); !IsPrereq(err) || !strings.Contains(err.Error(), "EXECUTOR=kubernetes") {
		t.Fatalf("unknown executor: %v", err)
	}
}
