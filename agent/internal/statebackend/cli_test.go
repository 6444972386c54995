package statebackend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statecmd"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
)

// These tests drive the real CLIs (Terraform 1.11 and, with OUTPOST_TOFU, OpenTofu) against the
// handler, with only built-in resources (terraform_data, local-exec), so no provider download.

const lifecycleTF = `
variable "v" {
  type    = string
  default = "one"
}
resource "terraform_data" "a" {
  input = var.v
}
resource "terraform_data" "b" {
  count = 3
  input = "${var.v}-${count.index}"
}
output "v" {
  value = terraform_data.a.output
}
`

type stateSummary struct {
	Serial    int64          `json:"serial"`
	Lineage   string         `json:"lineage"`
	Resources []any          `json:"resources"`
	Outputs   map[string]any `json:"outputs"`
}

func summarize(t *testing.T, b []byte) stateSummary {
	t.Helper()
	var s stateSummary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("state is not JSON: %v", err)
	}
	return s
}

// checkPullMatchesStore: what the CLI pulls is byte-for-byte what the store holds.
func checkPullMatchesStore(t *testing.T, e *env, w *workdir, key string) []byte {
	t.Helper()
	pulled, err := w.stdout("state", "pull")
	if err != nil {
		t.Fatal(err)
	}
	stored, _, err := e.store.Read(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(trimPull(pulled), stored) {
		t.Fatalf("state pull (%d bytes) differs from the stored state (%d bytes)", len(pulled), len(stored))
	}
	return stored
}

func TestCLILifecycle(t *testing.T) {
	forEachCLI(t, func(t *testing.T, c cli) {
		e := newEnv(t, statestore.Options{})
		key := "team-a/" + c.name + "/lifecycle"
		w := e.newWorkdir(t, c, key, "job-1", lifecycleTF)
		ctx := context.Background()

		if out, err := w.run("apply", "-auto-approve", "-input=false"); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		s1 := summarize(t, checkPullMatchesStore(t, e, w, key))
		if len(s1.Resources) != 2 || s1.Serial < 1 {
			t.Fatalf("after first apply: %+v", s1)
		}
		_, g1, _ := e.store.Read(ctx, key)
		if g1.Writer != "job/job-1/1" || g1.Lineage != s1.Lineage {
			t.Errorf("generation metadata: %+v", g1)
		}

		if out, err := w.run("apply", "-auto-approve", "-input=false", "-var", "v=two"); err != nil {
			t.Fatalf("apply change: %v\n%s", err, out)
		}
		s2 := summarize(t, checkPullMatchesStore(t, e, w, key))
		if s2.Serial <= s1.Serial || s2.Lineage != s1.Lineage || fmt.Sprint(s2.Outputs["v"]) != "map[type:string value:two]" {
			t.Fatalf("after change: %+v", s2)
		}
		if out, err := w.run("plan", "-detailed-exitcode", "-input=false", "-var", "v=two"); err != nil {
			t.Fatalf("plan after apply should show no changes: %v\n%s", err, out)
		}
		if out, err := w.run("destroy", "-auto-approve", "-input=false", "-var", "v=two"); err != nil {
			t.Fatalf("destroy: %v\n%s", err, out)
		}
		s3 := summarize(t, checkPullMatchesStore(t, e, w, key))
		if len(s3.Resources) != 0 || s3.Serial <= s2.Serial {
			t.Fatalf("after destroy: %+v", s3)
		}
		h, err := e.store.History(ctx, key)
		if err != nil || len(h) < 3 {
			t.Fatalf("history: %d entries, %v", len(h), err)
		}
		if l, _ := e.store.LockInfo(ctx, key); l != nil {
			t.Errorf("lock left behind: %+v", l)
		}
		if len(e.handler.RenewedLocks()) != 0 {
			t.Errorf("renewals left behind: %v", e.handler.RenewedLocks())
		}
	})
}

// bigTF makes a state of about 2 × count MiB: each instance's input (and its copy in output) is
// 1 MiB of SHA-512 hex, which compresses only about 2:1, so the gzip stream needs a dozen
// chunks. sensitive() keeps the CLI from printing it.
const bigTF = `
variable "seed" {
  type    = string
  default = "s"
}
locals {
  mib = join("", [for a in range(64) : join("", [for b in range(128) : sha512("${var.seed}-${a}-${b}")])])
}
resource "terraform_data" "big" {
  count = %d
  input = sensitive("${count.index}${local.mib}")
}
`

func TestCLILargeState(t *testing.T) {
	forEachCLI(t, func(t *testing.T, c cli) {
		e := newEnv(t, statestore.Options{})
		key := "big/" + c.name
		w := e.newWorkdir(t, c, key, "big", fmt.Sprintf(bigTF, 10))
		start := time.Now()
		if out, err := w.run("apply", "-auto-approve", "-input=false"); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		t.Logf("apply of a ~20 MiB state took %v", time.Since(start).Round(time.Millisecond))
		start = time.Now()
		stored := checkPullMatchesStore(t, e, w, key)
		t.Logf("state pull took %v", time.Since(start).Round(time.Millisecond))
		_, g, _ := e.store.Read(context.Background(), key)
		t.Logf("state: %.1f MiB, %d chunks, %.1f MiB stored", float64(len(stored))/(1<<20), g.Chunks, float64(g.StoredSize)/(1<<20))
		if len(stored) < 20<<20 || g.Chunks < 10 {
			t.Errorf("state of %d bytes in %d chunks: the test meant ≥ 20 MiB in ≥ 10 chunks", len(stored), g.Chunks)
		}
		if out, err := w.run("plan", "-detailed-exitcode", "-input=false"); err != nil {
			t.Fatalf("plan after apply should show no changes: %v\n%s", err, out)
		}
	})
}

const slowTF = `
variable "v" {
  type    = string
  default = "x"
}
resource "terraform_data" "slow" {
  input = var.v
  provisioner "local-exec" {
    command = "sleep %d"
  }
}
`

// Two applies on one state at once: exactly one gets the lock, the other fails naming the
// holder (never the holder's lock ID, which would let it write).
func TestCLIConcurrentApplies(t *testing.T) {
	forEachCLI(t, func(t *testing.T, c cli) {
		e := newEnv(t, statestore.Options{})
		key := "concurrent/" + c.name
		tf := fmt.Sprintf(slowTF, 6)
		w1 := e.newWorkdir(t, c, key, "one", tf)
		w2 := e.newWorkdir(t, c, key, "two", tf)
		a := w1.start("apply", "-auto-approve", "-input=false", "-var", "v=one")
		b := w2.start("apply", "-auto-approve", "-input=false", "-var", "v=two")
		var loser, winner *started
		var loserName string
		select {
		case err := <-a.done:
			a.done <- err
			loser, winner, loserName = a, b, "one"
		case err := <-b.done:
			b.done <- err
			loser, winner, loserName = b, a, "two"
		case <-time.After(60 * time.Second):
			t.Fatal("neither apply finished")
		}
		if err := loser.wait(t, time.Second); err == nil {
			t.Fatalf("apply %s should have failed on the lock:\n%s", loserName, loser.out.String())
		}
		held, err := e.store.LockInfo(context.Background(), key)
		if err != nil || held == nil {
			t.Fatalf("winner holds no lock: %v", err)
		}
		out := loser.out.String()
		if !strings.Contains(out, "Error acquiring the state lock") || !strings.Contains(out, held.Info.Holder) || strings.Contains(out, held.Info.ID) {
			t.Errorf("the loser's output should name the holder %s but not its lock ID %s:\n%s", held.Info.Holder, held.Info.ID, out)
		}
		if err := winner.wait(t, 2*time.Minute); err != nil {
			t.Fatalf("winner failed: %v\n%s", err, winner.out.String())
		}
		if l, _ := e.store.LockInfo(context.Background(), key); l != nil {
			t.Errorf("lock left after the winner finished: %+v", l)
		}
		t.Logf("loser output:\n%s", out)
	})
}

// A writer that dies between laying down the chunks and swapping the manifest: the CLI's
// write fails, and the previous generation is read back intact by the CLI and the store.
func TestCLIWriterKilledBeforeSwap(t *testing.T) {
	forEachCLI(t, func(t *testing.T, c cli) {
		var mu sync.Mutex
		armed := false
		crashes := 0
		e := newEnv(t, statestore.Options{ChunkSize: 64 << 10, BeforeManifestSwap: func(ctx context.Context, key string, gen int64) error {
			mu.Lock()
			defer mu.Unlock()
			if armed {
				crashes++
				return fmt.Errorf("simulated agent crash before swapping to generation %d", gen)
			}
			return nil
		}})
		key := "crash/" + c.name
		w := e.newWorkdir(t, c, key, "crashy", fmt.Sprintf(bigTF, 1))
		if out, err := w.run("apply", "-auto-approve", "-input=false", "-var", "seed=one"); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		before, g1, err := e.store.Read(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		armed = true
		mu.Unlock()
		out, err := w.run("apply", "-auto-approve", "-input=false", "-var", "seed=two")
		if err == nil {
			t.Fatalf("apply succeeded although every swap failed:\n%s", out)
		}
		mu.Lock()
		armed = false
		n := crashes
		mu.Unlock()
		if n == 0 {
			t.Fatalf("no write reached the swap:\n%s", out)
		}
		after, g, err := e.store.Read(context.Background(), key)
		if err != nil || g.Generation != g1.Generation || !bytes.Equal(after, before) {
			t.Fatalf("previous generation not intact: gen %d→%d, err %v", g1.Generation, g.Generation, err)
		}
		pulled, err := w.stdout("state", "pull")
		if err != nil || !bytes.Equal(trimPull(pulled), before) {
			t.Fatalf("CLI does not read the previous generation: %v", err)
		}
		// The orphans of the failed writes disappear with the next successful write.
		if out, err := w.run("apply", "-auto-approve", "-input=false", "-var", "seed=three"); err != nil {
			t.Fatalf("apply after the crash: %v\n%s", err, out)
		}
		checkPullMatchesStore(t, e, w, key)
		t.Logf("%d simulated crashes; CLI said: %s", n, lastLines(out, 6))
	})
}

// A run killed with SIGKILL holds the lock; once the agent sees the holder gone (HolderLiveness)
// it stops renewing, the lock expires, and the next run (waiting with -lock-timeout) proceeds.
func TestCLIDeadHolderLockExpires(t *testing.T) {
	forEachCLI(t, func(t *testing.T, c cli) {
		e := newEnv(t, statestore.Options{LockDuration: 3 * time.Second}, WithRenewInterval(500*time.Millisecond))
		key := "dead/" + c.name
		tf := fmt.Sprintf(slowTF, 120)
		w1 := e.newWorkdir(t, c, key, "victim", tf)
		a := w1.start("apply", "-auto-approve", "-input=false", "-var", "v=one")
		held := e.waitLocked(t, key, 60*time.Second)
		time.Sleep(4 * time.Second) // renewed past one lock duration while alive
		if l, _ := e.store.LockInfo(context.Background(), key); l == nil || l.Info.ID != held.Info.ID || l.Expired(time.Now()) {
			t.Fatalf("lock not kept alive for the running holder: %+v", l)
		}
		_ = a.kill()
		e.authz.kill("job/victim/1") // what the agent learns when the job's pod is gone

		w2 := e.newWorkdir(t, c, key, "next", fmt.Sprintf(slowTF, 0))
		start := time.Now()
		if out, err := w2.run("apply", "-auto-approve", "-input=false", "-lock-timeout=60s", "-var", "v=two"); err != nil {
			t.Fatalf("next run did not proceed: %v\n%s", err, out)
		}
		t.Logf("next run finished %v after the holder was killed (lock duration 3s)", time.Since(start).Round(100*time.Millisecond))
		if l, _ := e.store.LockInfo(context.Background(), key); l != nil {
			t.Errorf("lock left: %+v", l)
		}
	})
}

// A lock of a killed run that the agent still renews (it cannot tell the run is dead): the CLI's
// force-unlock is refused (job runners never force-unlock, and the lock ID is not even shown to
// them), the operator's `outpost-agent state force-unlock` is refused without a reason (the lock
// is live) and frees it with one, the next run proceeds, and the zombie's lock ID is dead.
func TestCLIForceUnlock(t *testing.T) {
	forEachCLI(t, func(t *testing.T, c cli) {
		e := newEnv(t, statestore.Options{LockDuration: 3 * time.Second}, WithRenewInterval(500*time.Millisecond))
		key := "force/" + c.name
		w1 := e.newWorkdir(t, c, key, "stuck", fmt.Sprintf(slowTF, 120))
		a := w1.start("apply", "-auto-approve", "-input=false", "-var", "v=one")
		held := e.waitLocked(t, key, 60*time.Second)
		_ = a.kill()

		w2 := e.newWorkdir(t, c, key, "operator", fmt.Sprintf(slowTF, 0))
		out, err := w2.run("plan", "-input=false", "-var", "v=two")
		if err == nil || !strings.Contains(out, "job/stuck/1") || strings.Contains(out, held.Info.ID) {
			t.Fatalf("plan should fail on the stuck lock of job/stuck/1 without showing its ID %s: %v\n%s", held.Info.ID, err, out)
		}
		if out, err := w2.run("force-unlock", "-force", held.Info.ID); err == nil {
			t.Fatalf("force-unlock through the state backend succeeded:\n%s", out)
		}
		if l, _ := e.store.LockInfo(context.Background(), key); l == nil || l.Info.ID != held.Info.ID {
			t.Fatalf("the lock changed after a refused force-unlock: %+v", l)
		}
		var stdout, stderr bytes.Buffer
		admin := []string{"force-unlock", "--kubeconfig", e.cluster.Kubeconfig, "--namespace", e.ns, "--org-id", testOrg, key}
		// The lock is live (the agent renews it): without a reason the operator is refused too.
		if code := statecmd.Main(admin, statecmd.Defaults{}, &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), "--reason") {
			t.Fatalf("outpost-agent state force-unlock of a live lock without --reason: exit %d\n%s%s", code, stdout.String(), stderr.String())
		}
		stdout.Reset()
		stderr.Reset()
		if code := statecmd.Main(append(admin, "--reason", "its run was killed"), statecmd.Defaults{}, &stdout, &stderr); code != 0 {
			t.Fatalf("outpost-agent state force-unlock: exit %d\n%s%s", code, stdout.String(), stderr.String())
		}
		if l, _ := e.store.LockInfo(context.Background(), key); l != nil {
			t.Fatalf("still locked after force-unlock: %+v", l)
		}
		if out, err := w2.run("apply", "-auto-approve", "-input=false", "-var", "v=two"); err != nil {
			t.Fatalf("apply after force-unlock: %v\n%s", err, out)
		}
		_, err = e.store.Write(context.Background(), key, stateDoc(99, "zombie"), statestore.WriteOptions{LockID: held.Info.ID})
		if !errors.Is(err, statestore.ErrLockMismatch) {
			t.Errorf("the force-unlocked holder could still write: %v", err)
		}
	})
}

// A state written by the stock `kubernetes` backend (Terraform chunks it into several Secrets
// above 1 MiB of gzip) is imported and used through the http backend without changes.
func TestCLIImportFromKubernetesBackend(t *testing.T) {
	forEachCLI(t, func(t *testing.T, c cli) {
		e := newEnv(t, statestore.Options{})
		count := 2 // ≈4 MiB of state, ≈2 MiB of gzip: several stock Secrets with Terraform
		if c.name == "tofu" {
			count = 0 // OpenTofu's stock backend cannot store more than one Secret (≈1 MiB)
		}
		tf := fmt.Sprintf(bigTF, count) + lifecycleTF
		stock := newWorkdirWith(t, c, fmt.Sprintf(`terraform {
  backend "kubernetes" {
    secret_suffix = "imp"
    namespace     = %q
    config_path   = %q
  }
}
`, e.ns, e.cluster.Kubeconfig), tf)
		if out, err := stock.run("apply", "-auto-approve", "-input=false"); err != nil {
			t.Fatalf("apply on the stock backend: %v\n%s", err, out)
		}
		pulled, err := stock.stdout("state", "pull")
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.store.ImportFromKubernetesBackend(context.Background(), "default", "imp", statestore.ImportKey("imported/"+c.name))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("imported from %v", res.SourceSecrets)
		got, _, err := e.store.Read(context.Background(), res.Key)
		if err != nil || !bytes.Equal(got, trimPull(pulled)) {
			t.Fatalf("imported state differs from the stock backend's: %v", err)
		}
		w := e.newWorkdir(t, c, res.Key, "after-import", tf)
		if out, err := w.run("plan", "-detailed-exitcode", "-input=false"); err != nil {
			t.Fatalf("plan on the imported state should show no changes: %v\n%s", err, out)
		}
	})
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestRollbackThenPlan: two applies write two versions; `outpost-agent state diff` names what
// changed between them, `rollback` writes the first back (the next serial, under the lock), and
// the CLI's next plan finds the infrastructure of the first apply in the state (no changes with
// its variables, changes with the second's) and its next apply writes on from there.
func TestRollbackThenPlan(t *testing.T) {
	forEachCLI(t, func(t *testing.T, c cli) {
		e := newEnv(t, statestore.Options{})
		key := "rollback/" + c.name
		w := e.newWorkdir(t, c, key, "dep-r", lifecycleTF)
		for _, v := range []string{"one", "two"} {
			if out, err := w.run("apply", "-auto-approve", "-input=false", "-var", "v="+v); err != nil {
				t.Fatalf("apply v=%s: %v\n%s", v, err, out)
			}
		}
		admin := func(args ...string) string {
			t.Helper()
			var stdout, stderr bytes.Buffer
			if code := statecmd.Main(append(args, "--kubeconfig", e.cluster.Kubeconfig, "--namespace", e.ns, "--org-id", testOrg), statecmd.Defaults{}, &stdout, &stderr); code != 0 {
				t.Fatalf("outpost-agent state %v: exit %d\n%s%s", args, code, stdout.String(), stderr.String())
			}
			return stdout.String()
		}
		hist, err := e.store.History(context.Background(), key)
		if err != nil || len(hist) < 2 {
			t.Fatalf("history %+v, %v", hist, err)
		}
		first, second := hist[len(hist)-1].Generation, hist[0].Generation
		if d := admin("diff", key, fmt.Sprint(first), fmt.Sprint(second)); !strings.Contains(d, "~ terraform_data.a") || !strings.Contains(d, "~ terraform_data.b[0]") ||
			!strings.Contains(d, "~ output v") || strings.Contains(d, "one") {
			t.Errorf("diff of the two applies:\n%s", d)
		}
		admin("rollback", key, fmt.Sprint(first), "--reason", "v=two broke it", "--by", "test")
		if out, err := w.run("plan", "-detailed-exitcode", "-input=false", "-var", "v=one"); err != nil {
			t.Errorf("plan with the first apply's variables after the rollback: %v (exit 2 = changes)\n%s", err, out)
		}
		if out, err := w.run("plan", "-detailed-exitcode", "-input=false", "-var", "v=two"); err == nil {
			t.Errorf("plan with the second apply's variables finds nothing to change after the rollback:\n%s", out)
		}
		if out, err := w.run("apply", "-auto-approve", "-input=false", "-var", "v=three"); err != nil {
			t.Fatalf("apply after the rollback: %v\n%s", err, out)
		}
		_, g, err := e.store.Read(context.Background(), key)
		if err != nil || g.Serial <= hist[0].Serial+1 {
			t.Errorf("after rollback and apply: serial %d (%v), want beyond the rollback's %d", g.Serial, err, hist[0].Serial+1)
		}
	})
}
