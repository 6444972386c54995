package kubeclient

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeKubeconfig writes a kubeconfig whose current context points at server.
func writeKubeconfig(t *testing.T, name, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: %[1]s
  cluster: {server: %[2]q}
users:
- name: %[1]s
  user: {token: t-%[1]s}
contexts:
- name: %[1]s
  context: {cluster: %[1]s, user: %[1]s}
current-context: %[1]s
`, name, server)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigResolvesKubeconfig(t *testing.T) {
	a := writeKubeconfig(t, "a", "https://a.example:6443")
	b := writeKubeconfig(t, "b", "https://b.example:6443")
	missing := filepath.Join(t.TempDir(), "absent")
	for _, tc := range []struct {
		kubeconfig, wantHost, wantErr string
	}{
		{kubeconfig: a, wantHost: "https://a.example:6443"},
		// A list merges like $KUBECONFIG: the first file's current context wins, missing files
		// are skipped.
		{kubeconfig: strings.Join([]string{missing, b, a}, string(filepath.ListSeparator)), wantHost: "https://b.example:6443"},
		// One path names a file that must exist.
		{kubeconfig: missing, wantErr: "set --kubeconfig"},
	} {
		rc, err := Config(Options{Kubeconfig: tc.kubeconfig, QPS: 20, Burst: 40, UserAgent: "outpost-test/1", Timeout: time.Minute})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want one mentioning %q", tc.kubeconfig, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.kubeconfig, err)
		}
		if rc.Host != tc.wantHost || rc.QPS != 20 || rc.Burst != 40 || rc.UserAgent != "outpost-test/1" || rc.Timeout != time.Minute {
			t.Errorf("%s: host %s qps %v burst %d ua %q timeout %v", tc.kubeconfig, rc.Host, rc.QPS, rc.Burst, rc.UserAgent, rc.Timeout)
		}
	}
	// Without a kubeconfig and outside a pod: in-cluster credentials are missing, and the error
	// says how to run the command elsewhere.
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := Config(Options{}); err == nil || !strings.Contains(err.Error(), "set --kubeconfig") {
		t.Errorf("in-cluster outside a pod: %v", err)
	}
	// Zero QPS and burst keep client-go's defaults rather than an unlimited client.
	if rc, err := Config(Options{Kubeconfig: a}); err != nil || rc.QPS != 0 || rc.Burst != 0 {
		t.Errorf("defaults: %+v, %v", rc, err)
	}
}
