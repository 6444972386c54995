package statecmd

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// TestStateCommand drives `outpost-agent state` in-process against a real API server. The package
// has no TestMain (its usage test needs no cluster), so this test starts its own test bed (or
// reuses OUTPOST_TESTBED_KUBECONFIG's) rather than making every test of the package wait for one.
func TestStateCommand(t *testing.T) {
	cluster := testbed.ForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := testbed.NewNamespace(t, cluster)
	t.Setenv("KUBECONFIG", "")

	run := func(wantCode int, args ...string) (string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		full := append(append([]string{}, args...), "--kubeconfig", cluster.Kubeconfig, "--namespace", ns, "--org-id", "acme")
		code := Main(full, Defaults{}, &stdout, &stderr)
		t.Logf("$ outpost-agent state %s  # exit %d\n%s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
		if code != wantCode {
			t.Fatalf("state %v: exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, wantCode, stdout.String(), stderr.String())
		}
		if wantCode == exitRuntime && strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("state %v: error is not one line:\n%s", args, stderr.String())
		}
		return stdout.String(), stderr.String()
	}

	store := mustStore(statestore.New(cluster.Client(), ns, statestore.Options{Logger: slog.New(slog.DiscardHandler), Scope: "acme"}))
	const key = "team-a/prod/network"
	// Odd whitespace and a trailing newline: get must hand back the stored bytes, not re-encoded JSON.
	states := make([][]byte, 3)
	for i := range states {
		states[i] = fmt.Appendf(nil, "{\"version\": 4,\n  \"serial\":%d, \"lineage\": \"lin-1\",\t\"resources\": [], \"n\": %q}\n", i+1, strings.Repeat("x", i*40))
		if _, err := store.Write(ctx, key, states[i], statestore.WriteOptions{Writer: "test"}); err != nil {
			t.Fatal(err)
		}
	}

	out, _ := run(exitOK, "list")
	if !strings.Contains(out, key) || !strings.Contains(out, "lin-1") {
		t.Errorf("list:\n%s", out)
	}
	var list []listEntry
	out, _ = run(exitOK, "list", "--json")
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 || list[0].Generation != 3 || list[0].Serial != 3 || list[0].Size != int64(len(states[2])) {
		t.Errorf("list --json = %+v, %v\n%s", list, err, out)
	}

	var hist []statestore.Generation
	out, _ = run(exitOK, "history", key, "--json")
	if err := json.Unmarshal([]byte(out), &hist); err != nil || len(hist) != 3 || hist[0].Generation != 3 || hist[2].Generation != 1 {
		t.Errorf("history --json = %+v, %v", hist, err)
	}
	if out, _ = run(exitOK, "history", key); strings.Count(out, "\n") != 4 || !strings.Contains(out, hist[2].SHA256) {
		t.Errorf("history:\n%s", out)
	}

	if out, _ = run(exitOK, "get", key); out != string(states[2]) {
		t.Errorf("get = %q, want %q", out, states[2])
	}
	if out, _ = run(exitOK, "get", key, "--generation", "1"); out != string(states[0]) {
		t.Errorf("get --generation 1 = %q, want %q", out, states[0])
	}

	if out, _ = run(exitOK, "restore", key, "1"); !strings.Contains(out, "as generation 4") {
		t.Errorf("restore: %s", out)
	}
	if out, _ = run(exitOK, "get", key); out != string(states[0]) {
		t.Errorf("get after restore = %q, want %q", out, states[0])
	}
	if h, err := store.History(ctx, key); err != nil || len(h) != 4 || h[0].Generation != 4 || h[0].Source != "restore of generation 1" {
		t.Errorf("history after restore = %+v, %v", h, err)
	}

	// Locks: shown by list and lock-info, refused by restore, removed by force-unlock.
	lock := statestore.LockInfo{ID: "lock-7f3a", Operation: "OperationTypeApply", Who: "alice@laptop", Holder: "job/42/1"}
	if err := store.Lock(ctx, key, lock); err != nil {
		t.Fatal(err)
	}
	if out, _ = run(exitOK, "list"); !strings.Contains(out, "job/42/1") {
		t.Errorf("list of a locked state:\n%s", out)
	}
	if out, _ = run(exitOK, "lock-info", key); !strings.Contains(out, "lock-7f3a") || !strings.Contains(out, "alice@laptop") {
		t.Errorf("lock-info:\n%s", out)
	}
	if _, errOut := run(exitRuntime, "restore", key, "2"); !strings.Contains(errOut, key) || !strings.Contains(errOut, "--force") {
		t.Errorf("restore while locked: %s", errOut)
	}
	if out, _ = run(exitOK, "force-unlock", key, "--reason", "its run is gone"); !strings.Contains(out, "lock-7f3a") || !strings.Contains(out, "force-unlocked") {
		t.Errorf("force-unlock:\n%s", out)
	}
	if out, _ = run(exitOK, "lock-info", key); !strings.Contains(out, "not locked") {
		t.Errorf("lock-info after force-unlock: %s", out)
	}
	if err := store.Lock(ctx, key, lock); err != nil {
		t.Fatal(err)
	}
	if out, _ = run(exitOK, "restore", "--force", key, "2"); !strings.Contains(out, "lock-7f3a") || !strings.Contains(out, "as generation 5") {
		t.Errorf("restore --force:\n%s", out)
	}

	// Import from Secrets laid down as the stock kubernetes backend does: one gzip stream split
	// across tfstate-{workspace}-{suffix} and -part-1, labelled tfstate=true.
	stock := []byte(`{"version":4,"serial":9,"lineage":"stock-lin","resources":[]}` + "\n")
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = zw.Write(stock)
	_ = zw.Close()
	half := z.Len() / 2
	for i, part := range [][]byte{z.Bytes()[:half], z.Bytes()[half:]} {
		name := "tfstate-default-app"
		if i > 0 {
			name += fmt.Sprintf("-part-%d", i)
		}
		if _, err := cluster.Client().CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"tfstate": "true", "tfstateWorkspace": "default", "tfstateSecretSuffix": "app"}},
			Data:       map[string][]byte{"tfstate": part},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if out, _ = run(exitOK, "import", "--workspace", "default", "--suffix", "app"); !strings.Contains(out, "tfstate-default-app-part-1") {
		t.Errorf("import: %s", out)
	}
	if out, _ = run(exitOK, "get", "tfstate-default-app"); out != string(stock) {
		t.Errorf("get of the imported state = %q, want %q", out, stock)
	}
	run(exitOK, "import", "--suffix", "app", "--key", "moved/app")
	if out, _ = run(exitOK, "get", "moved/app"); out != string(stock) {
		t.Errorf("get of the imported state under --key = %q", out)
	}
	if _, errOut := run(exitRuntime, "import", "--suffix", "app", "--key", key); !strings.Contains(errOut, "--overwrite") {
		t.Errorf("import over a different state: %s", errOut)
	}

	// Failures name the state and the generation.
	if _, errOut := run(exitRuntime, "get", "no/such/state"); !strings.Contains(errOut, `"no/such/state"`) || !strings.Contains(errOut, "state list") {
		t.Errorf("get of an unknown key: %s", errOut)
	}
	if _, errOut := run(exitRuntime, "get", key, "--generation", "99"); !strings.Contains(errOut, "no generation 99") || !strings.Contains(errOut, key) {
		t.Errorf("get of a generation that is not kept: %s", errOut)
	}
	if _, errOut := run(exitRuntime, "force-unlock", "no/such/state"); !strings.Contains(errOut, `"no/such/state"`) {
		t.Errorf("force-unlock of an unknown key: %s", errOut)
	}

	// The namespace and the organisation may come from the agent's configuration, as inside the
	// agent's pod.
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"get", key, "--kubeconfig", cluster.Kubeconfig}, Defaults{Namespace: ns, OrgID: "acme"}, &stdout, &stderr); code != exitOK || stdout.String() != string(states[1]) {
		t.Errorf("get with the agent's state.namespace: exit %d, %q, %s", code, stdout.String(), stderr.String())
	}
}

// Usage errors exit 2 with the usage text and need no cluster.
func TestStateCommandUsage(t *testing.T) {
	for name, args := range map[string][]string{
		"no command":        {},
		"unknown command":   {"frobnicate", "--namespace", "x"},
		"missing key":       {"get", "--namespace", "x"},
		"extra argument":    {"history", "a", "b", "--namespace", "x"},
		"bad generation":    {"restore", "k", "first", "--namespace", "x"},
		"no namespace":      {"list"},
		"no org id":         {"list", "--namespace", "x"},
		"unknown flag":      {"list", "--namespace", "x", "--frob"},
		"import w/o suffix": {"import", "--namespace", "x"},
		"bad key file":      {"list", "--namespace", "x", "--encryption-key-file", "/nonexistent/key"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(args, Defaults{}, &stdout, &stderr); code != exitConfigError || !strings.Contains(stderr.String(), "usage: outpost-agent state") {
			t.Errorf("%s: exit code %d, want %d; stderr:\n%s", name, code, exitConfigError, stderr.String())
		}
	}
}

// mustStore is statestore.New for tests: a configuration error panics.
func mustStore(s *statestore.Store, err error) *statestore.Store {
	if err != nil {
		panic(err)
	}
	return s
}
