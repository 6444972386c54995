package demo

import (
	"errors"
	"net"
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
