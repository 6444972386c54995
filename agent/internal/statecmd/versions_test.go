package statecmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// versionState is a state document whose resources and outputs hold values the commands must
// never print.
func versionState(serial int, resources map[string]string, outputs map[string]bool) []byte {
	var rs []string
	for name, value := range resources {
		rs = append(rs, fmt.Sprintf(`{"mode":"managed","type":"terraform_data","name":%q,"provider":"provider[\"terraform.io/builtin/terraform\"]","instances":[{"schema_version":0,"attributes":{"input":{"value":%q,"type":"string"}}}]}`, name, value))
	}
	var os []string
	for name, sensitive := range outputs {
		os = append(os, fmt.Sprintf(`%q:{"value":"value-of-%s","type":"string","sensitive":%v}`, name, name, sensitive))
	}
	return fmt.Appendf(nil, `{"version":4,"terraform_version":"1.11.4","serial":%d,"lineage":"L","outputs":{%s},"resources":[%s]}`,
		serial, strings.Join(os, ","), strings.Join(rs, ","))
}

// TestShowDiffRollbackAndBreak drives show, diff, rollback and force-unlock against a real API
// server: names only in every output, a rollback written as the next serial under the lock with
// who and why, and a live lock broken only with a reason, recorded on the lock.
func TestShowDiffRollbackAndBreak(t *testing.T) {
	cluster := testbed.ForTest(t, testbed.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := testbed.NewNamespace(t, cluster)
	t.Setenv("KUBECONFIG", "")
	run := func(wantCode int, args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := Main(append(append([]string{}, args...), "--kubeconfig", cluster.Kubeconfig, "--namespace", ns, "--org-id", "acme"), Defaults{}, &stdout, &stderr)
		if code != wantCode {
			t.Fatalf("state %v: exit %d, want %d\n%s%s", args, code, wantCode, stdout.String(), stderr.String())
		}
		out := stdout.String() + stderr.String()
		if strings.Contains(out, "value-of-") || strings.Contains(out, "hunter2") {
			t.Errorf("state %v printed a value:\n%s", args, out)
		}
		return out
	}
	store := mustStore(statestore.New(cluster.Client(), ns, statestore.Options{Logger: slog.New(slog.DiscardHandler), Scope: "acme"}))
	const key = "team/app"
	versions := [][]byte{
		versionState(1, map[string]string{"a": "hunter2-a", "b": "hunter2-b"}, map[string]bool{"url": false, "password": true}),
		versionState(2, map[string]string{"a": "hunter2-a2", "c": "hunter2-c"}, map[string]bool{"url": false}),
	}
	for _, v := range versions {
		if _, err := store.Write(ctx, key, v, statestore.WriteOptions{Writer: "job/dep-1/1"}); err != nil {
			t.Fatal(err)
		}
	}

	out := run(exitOK, "show", key, "--generation", "1")
	for _, want := range []string{"terraform_data.a", "terraform_data.b", "url", "password (sensitive)", "2 resource instances, 2 outputs"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	var d api.StateDiff
	if err := json.Unmarshal([]byte(run(exitOK, "diff", key, "1", "2", "--json")), &d); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(d.Added, d.Removed, d.Changed, d.OutputsRemoved) != "[terraform_data.c] [terraform_data.b] [terraform_data.a] [password]" {
		t.Errorf("diff 1 2 = %+v", d)
	}
	if out := run(exitOK, "diff", key, "1", "2"); !strings.Contains(out, "+ terraform_data.c") || !strings.Contains(out, "~ terraform_data.a") || !strings.Contains(out, "- output password") {
		t.Errorf("diff:\n%s", out)
	}

	run(exitConfigError, "rollback", key, "1")
	out = run(exitOK, "rollback", key, "1", "--reason", "apply 2 broke the app", "--by", "alice")
	got, g, err := store.Read(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if g.Serial != 3 || g.Generation != 3 || !bytes.Contains(got, []byte("hunter2-b")) || g.Source != "rollback to generation 1 by alice: apply 2 broke the app" || g.Writer != "admin/alice" {
		t.Errorf("after rollback: generation %d serial %d source %q writer %q\n%s", g.Generation, g.Serial, g.Source, g.Writer, out)
	}
	if l, _ := store.LockInfo(ctx, key); l != nil {
		t.Errorf("the rollback left its lock: %+v", l)
	}
	if d := run(exitOK, "diff", key, "1", "3"); !strings.Contains(d, "0 added, 0 removed, 0 changed") {
		t.Errorf("the rolled back version differs from generation 1:\n%s", d)
	}

	// A live lock: refused without a reason, refused to a rollback, broken with one and recorded.
	if err := store.Lock(ctx, key, statestore.LockInfo{ID: "run-lock", Holder: "job/dep-2/1", Pod: "outpost-dep-2-1-abcde"}); err != nil {
		t.Fatal(err)
	}
	run(exitRuntime, "rollback", key, "2", "--reason", "x")
	if out := run(exitRuntime, "force-unlock", key); !strings.Contains(out, "job/dep-2/1") || !strings.Contains(out, "--reason") {
		t.Errorf("force-unlock of a live lock without a reason:\n%s", out)
	}
	if l, _ := store.LockInfo(ctx, key); l == nil {
		t.Fatal("the live lock was broken without a reason")
	}
	run(exitOK, "force-unlock", key, "--reason", "node gone for good", "--by", "bob")
	b, err := store.LastBreak(ctx, key)
	if err != nil || b == nil || b.By != "bob" || b.Reason != "node gone for good" || b.Holder != "job/dep-2/1" || b.Pod != "outpost-dep-2-1-abcde" || !b.Live {
		t.Errorf("recorded break %+v, %v", b, err)
	}
}
