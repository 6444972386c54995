package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/config"
)

// fakeAPIServer records the User-Agent of every request that reaches it and answers /version;
// every other path is a 404, which is all a command needs to have tried.
type fakeAPIServer struct {
	*httptest.Server
	mu     sync.Mutex
	agents []string
}

func newFakeAPIServer(t *testing.T) *fakeAPIServer {
	f := &fakeAPIServer{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.agents = append(f.agents, r.UserAgent())
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/version" {
			_, _ = w.Write([]byte(`{"major":"1","minor":"34","gitVersion":"v1.34.4"}`))
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	}))
	t.Cleanup(f.Close)
	return f
}

// take returns and clears the user agents seen.
func (f *fakeAPIServer) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.agents
	f.agents = nil
	return out
}

func writeKubeconfig(t *testing.T, name, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	body := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: %[1]s\n  cluster: {server: %[2]q}\n"+
		"users:\n- name: %[1]s\n  user: {token: t}\ncontexts:\n- name: %[1]s\n  context: {cluster: %[1]s, user: %[1]s}\n"+
		"current-context: %[1]s\n", name, server)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The agent (`outpost-agent`) and the state command (`outpost-agent state`) resolve --kubeconfig
// the same way, through package kubeclient: one path, or a $KUBECONFIG-style list merged as
// kubectl merges it (the first file's current context wins; missing files are skipped).
func TestCommandsResolveKubeconfigAlike(t *testing.T) {
	a, b := newFakeAPIServer(t), newFakeAPIServer(t)
	fileA, fileB := writeKubeconfig(t, "a", a.URL), writeKubeconfig(t, "b", b.URL)
	missing := filepath.Join(t.TempDir(), "absent")
	t.Setenv("OUTPOST_STATE_ENCRYPTION_KEY_FILE", "")

	for _, tc := range []struct {
		name, kubeconfig string
		want, other      *fakeAPIServer
	}{
		{"one path", fileA, a, b},
		{"a list", strings.Join([]string{missing, fileB, fileA}, string(filepath.ListSeparator)), b, a},
	} {
		// The agent's client, built from its flags as run builds it.
		cfg, err := config.Parse([]string{"--kubeconfig", tc.kubeconfig}, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		kube, err := newKubeClient(cfg, newLimiter(cfg))
		if err != nil {
			t.Fatalf("%s: agent: %v", tc.name, err)
		}
		if _, err := kube.CoreV1().RESTClient().Get().AbsPath("/version").DoRaw(t.Context()); err != nil {
			t.Fatalf("%s: agent: %v", tc.name, err)
		}
		if got := tc.want.take(); len(got) == 0 || !strings.HasPrefix(got[0], "outpost-agent/") {
			t.Errorf("%s: the agent did not reach the kubeconfig's cluster as outpost-agent: %q", tc.name, got)
		}

		// The state command, run as an operator runs it.
		var stdout, stderr bytes.Buffer
		dispatch([]string{"state", "list", "--namespace", "x", "--org-id", "acme", "--kubeconfig", tc.kubeconfig}, &stdout, &stderr)
		if got := tc.want.take(); len(got) == 0 || !strings.HasPrefix(got[0], "outpost-agent-state/") {
			t.Errorf("%s: the state command did not reach the kubeconfig's cluster: %q; stderr:\n%s", tc.name, got, stderr.String())
		}
		if got := tc.other.take(); len(got) != 0 {
			t.Errorf("%s: the other cluster was reached: %q", tc.name, got)
		}
	}
}
