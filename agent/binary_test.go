package main

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinaryLinksOnlyTheClientsItUses builds the agent and reads its symbols: it must hold the
// typed clients of Jobs, the core group and Leases and nothing of client-go's clientset of every
// API group or its informer factory. Through a kubernetes.Interface every group's client stayed
// reachable, which the agent's idle memory paid for (its binary's pages are most of it).
func TestBinaryLinksOnlyTheClientsItUses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent: skipped under -short")
	}
	bin := filepath.Join(t.TempDir(), "outpost-agent")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, s := range syms {
		for _, p := range []string{"batch/v1", "core/v1", "coordination/v1"} {
			if strings.HasPrefix(s.Name, "k8s.io/client-go/kubernetes/typed/"+p+".") {
				used[p] = true
			}
		}
		for _, p := range []string{"k8s.io/client-go/kubernetes.", "k8s.io/client-go/informers.", "k8s.io/client-go/informers/",
			"k8s.io/client-go/kubernetes/typed/apps/", "k8s.io/client-go/kubernetes/typed/rbac/"} {
			if strings.HasPrefix(s.Name, p) {
				t.Fatalf("the agent links %s", s.Name)
			}
		}
	}
	if len(used) != 3 {
		t.Fatalf("typed clients linked: %v, want batch/v1, core/v1 and coordination/v1 (is the check still reading the right names?)", used)
	}
}
