package orchestrator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/bolt"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/engines"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/postgres"
)

// runToEnd queues an apply on acme/r1 with a secret variable, runs it through claim, logs (one
// append per line), outputs and events, and ends it succeeded.
func runToEnd(h *harness, a *agent, logLines int) api.Deployment {
	h.t.Helper()
	var d api.Deployment
	h.mustAdmin(http.MethodPost, orgPath("acme")+"/deployments", api.DeploymentInput{
		RunnerID: "r1", Operation: api.OperationApply, StateKey: "k",
		Source:    api.Source{Inline: &api.InlineSource{ArchiveTarGz: gzipMagic}},
		Variables: map[string]json.RawMessage{"db_password": json.RawMessage(`"hunter2"`)},
	}, http.StatusCreated, &d)
	c := a.claim(d.ID, 1, "pod-a")
	var off int64
	for i := range logLines {
		line := fmt.Sprintf("line %d\n", i)
		if r := h.appendLog(c.JobToken, off, line); r.code != http.StatusOK {
			h.t.Fatalf("log: HTTP %d %s", r.code, r.body)
		}
		off += int64(len(line))
	}
	if r := h.job(c.JobToken, http.MethodPut, "/api/v1/job/outputs", "application/json", []byte(`{"url":{"value":"https://x","sensitive":false}}`)); r.code != http.StatusNoContent {
		h.t.Fatalf("outputs: HTTP %d %s", r.code, r.body)
	}
	a.mustOK("/api/v1/agent/deployments/"+d.ID+"/events", api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 0, Type: api.EventStarted}}, nil)
	a.mustOK("/api/v1/agent/deployments/"+d.ID+"/events", api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventFinished, Result: api.StatusSucceeded}}, nil)
	return h.deployment(d.ID)
}

// keysOf lists every key of the database that names the deployment, bucket by bucket.
func keysOf(h *harness, org, id string) []string {
	h.t.Helper()
	if pg, ok := h.eng.(*postgres.Engine); ok {
		return pgRowsOf(h, pg, org, id)
	}
	var out []string
	err := boltDB(h).View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				if bytes.Contains(k, []byte(org+"/"+id)) || (bytes.HasPrefix(k, []byte(org+"/")) && string(v) == id) {
					out = append(out, string(name))
				}
				return nil
			})
		})
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

func TestRetentionPurgesSourcesThenLogsThenDeployments(t *testing.T) {
	t.Parallel()
	ret := store.Retention{Sources: time.Hour, Logs: 48 * time.Hour, Deployments: 7 * 24 * time.Hour}
	h := newHarness(t, func(c *testConfig) { c.Retention = ret; c.PurgeBatch = 5 })
	a := h.setupRunner("acme", "r1", 2)
	ended := runToEnd(h, a, 12)
	// A deployment that has not ended (queued: no job lease to keep alive across the jumps of
	// the clock) is never retention's business.
	queued := h.deploy(api.OperationPlan)
	queuedBefore := h.admin(http.MethodGet, orgPath("acme")+"/deployments/"+queued.ID, nil).body
	if ended.Source.Inline == nil || ended.Variables == nil || ended.LogSize == 0 {
		t.Fatalf("ended deployment before retention: %+v", ended)
	}
	advance := func(d time.Duration) {
		h.clock.Advance(d)
		h.sweep()
	}

	advance(ret.Sources - time.Minute)
	if d := h.deployment(ended.ID); d.SourcePurgedAt != nil || d.Source.Inline == nil {
		t.Fatalf("source purged before its retention: %+v", d)
	}

	advance(2 * time.Minute)
	d := h.deployment(ended.ID)
	if d.SourcePurgedAt == nil || d.Source.Inline != nil || d.Variables != nil {
		t.Fatalf("an hour after the end, source and variables are still there: %+v", d)
	}
	raw := h.admin(http.MethodGet, orgPath("acme")+"/deployments/"+ended.ID, nil).body
	if bytes.Contains(raw, []byte("hunter2")) {
		t.Fatalf("the secret variable survived the source purge: %s", raw)
	}
	if d.LogSize != ended.LogSize || d.LogsPurgedAt != nil {
		t.Fatalf("the log went with the source: %+v", d)
	}
	if got := h.metric(`outpost_orchestrator_purged_total{what="sources"}`); got != 1 {
		t.Fatalf("purged_total{sources} = %v, want 1", got)
	}

	advance(ret.Logs - ret.Sources)
	d = h.deployment(ended.ID)
	var chunk api.LogChunk
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments/"+ended.ID+"/logs", nil, http.StatusOK, &chunk)
	var events api.List[api.Event]
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments/"+ended.ID+"/events", nil, http.StatusOK, &events)
	if d.LogsPurgedAt == nil || d.LogSize != 0 || len(chunk.Data) != 0 || !chunk.Complete || len(events.Items) != 0 {
		t.Fatalf("two days after the end: deployment %+v, log %+v, events %+v; want log and events gone, the log complete", d, chunk, events.Items)
	}
	var outs api.Outputs
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments/"+ended.ID+"/outputs", nil, http.StatusOK, &outs)
	if outs["url"].Value == nil {
		t.Fatal("outputs went with the log; they stay as long as the deployment")
	}

	advance(ret.Deployments - ret.Logs)
	for _, p := range []string{"", "/logs", "/events", "/outputs"} {
		if r := h.admin(http.MethodGet, orgPath("acme")+"/deployments/"+ended.ID+p, nil); r.code != http.StatusNotFound {
			t.Fatalf("GET %s%s a week after the end: HTTP %d, want 404", ended.ID, p, r.code)
		}
	}
	if left := keysOf(h, "acme", ended.ID); len(left) != 0 {
		t.Fatalf("the purged deployment left keys in buckets %v", left)
	}
	if got := h.metric(`outpost_orchestrator_jobs{status="succeeded"}`); got != 0 {
		t.Fatalf("jobs{succeeded} = %v after the purge, want 0", got)
	}
	for what, want := range map[string]float64{"sources": 1, "logs": 1, "deployments": 1} {
		if got := h.metric(`outpost_orchestrator_purged_total{what="` + what + `"}`); got != want {
			t.Fatalf("purged_total{%s} = %v, want %v", what, got, want)
		}
	}
	after := h.admin(http.MethodGet, orgPath("acme")+"/deployments/"+queued.ID, nil).body
	if !bytes.Equal(after, queuedBefore) {
		t.Fatalf("retention changed a deployment that has not ended:\nbefore %s\nafter  %s", queuedBefore, after)
	}
}

func TestRetentionKeepForeverAndValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *testConfig) {
		c.Retention = store.Retention{Sources: store.KeepForever, Logs: store.KeepForever, Deployments: store.KeepForever}
	})
	a := h.setupRunner("acme", "r1", 1)
	d := runToEnd(h, a, 2)
	h.clock.Advance(10 * 365 * 24 * time.Hour)
	h.sweep()
	if got := h.deployment(d.ID); got.Source.Inline == nil || got.LogSize != d.LogSize {
		t.Fatalf("kept forever, yet after ten years: %+v", got)
	}
	eng, err := engines.Open(t.Context(), engines.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(Config{Engine: eng, DataDir: t.TempDir(), AdminToken: h.token, Retention: store.Retention{Logs: time.Minute}})
	if err == nil || !strings.Contains(err.Error(), "log retention") {
		t.Fatalf("log retention shorter than the job token grace: %v", err)
	}
}

// TestRetentionBackfillsOldDatabases: deployments that ended before the purge indexes existed
// are indexed once when the database is opened, and then purged like any other.
func TestRetentionBackfillsOldDatabases(t *testing.T) {
	t.Parallel()
	h := newHarness(t, onBolt, func(c *testConfig) { c.Retention = store.Retention{Sources: time.Hour} })
	a := h.setupRunner("acme", "r1", 1)
	d := runToEnd(h, a, 1)
	// Make it look like a database written before retention: no index entries, no marker.
	if err := boltDB(h).Update(func(tx *bbolt.Tx) error {
		for _, b := range bolt.PurgeBuckets {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
		}
		return tx.Bucket(bolt.BucketMeta).Delete(bolt.MetaEndedIndexed)
	}); err != nil {
		t.Fatal(err)
	}
	h.restart()
	h.clock.Advance(2 * time.Hour)
	h.sweep()
	if got := h.deployment(d.ID); got.SourcePurgedAt == nil {
		t.Fatalf("a deployment that ended before the index existed kept its source: %+v", got)
	}
}

// TestPurgeWorksInBoundedBatches purges a backlog with a budget of 10 keys per transaction:
// every transaction stays within the budget (plus the handful of keys of one deployment's
// record), and writers get the database in between. The timings are logged, not asserted.
func TestPurgeWorksInBoundedBatches(t *testing.T) {
	t.Parallel()
	const budget, deployments, lines = 10, 6, 30
	ret := store.Retention{Sources: store.KeepForever, Logs: store.KeepForever, Deployments: time.Hour}
	h := newHarness(t, func(c *testConfig) { c.Retention = ret; c.PurgeBatch = budget })
	a := h.setupRunner("acme", "r1", deployments)
	var ids []string
	for range deployments {
		ids = append(ids, runToEnd(h, a, lines).ID)
	}
	h.clock.Advance(2 * time.Hour)
	countKeys := func() int {
		if pg, ok := h.eng.(*postgres.Engine); ok {
			return pgRowCount(h, pg)
		}
		n := 0
		_ = boltDB(h).View(func(tx *bbolt.Tx) error {
			return tx.ForEach(func(_ []byte, b *bbolt.Bucket) error {
				n += b.Stats().KeyN
				return nil
			})
		})
		return n
	}

	// A writer queues deployments while the purge runs, and times each create.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes []time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		body := jsonBytes(t, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationPlan, StateKey: "k", Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: gzipMagic}}})
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			r, err := h.send(http.MethodPost, orgPath("acme")+"/deployments", map[string]string{"Authorization": "Bearer " + h.token, "Content-Type": "application/json"}, body)
			if err != nil || r.code != http.StatusCreated {
				return
			}
			writes = append(writes, time.Since(start))
		}
	}()
	batches, start := 0, time.Now()
	var total store.Purged
	for {
		before := countKeys()
		done, more, err := h.srv.store.PurgeBatch(t.Context(), h.srv.cfg.Retention, budget)
		if err != nil {
			t.Fatal(err)
		}
		batches++
		total.Add(done)
		// The keys this batch deleted; the writer's creates running alongside only add keys, so
		// this never overstates the batch.
		deleted := before - countKeys()
		if deleted > budget+8 {
			t.Fatalf("batch %d deleted %d keys; the budget is %d", batches, deleted, budget)
		}
		if !more {
			break
		}
		if batches > 1000 {
			t.Fatal("the purge does not end")
		}
	}
	took := time.Since(start)
	close(stop)
	wg.Wait()
	if total.Deployments != deployments {
		t.Fatalf("purged %d deployments, want %d", total.Deployments, deployments)
	}
	for _, id := range ids {
		if left := keysOf(h, "acme", id); len(left) != 0 {
			t.Fatalf("%s left keys in %v", id, left)
		}
	}
	minBatches := deployments * (lines + 2) / (budget + 8)
	if batches < minBatches {
		t.Fatalf("%d batches for %d keys with a budget of %d: the purge was not split", batches, deployments*(lines+2), budget)
	}
	var slowest time.Duration
	for _, w := range writes {
		slowest = max(slowest, w)
	}
	t.Logf("purged %d deployments (%d log chunks) in %d transactions over %s; %d creates ran meanwhile, the slowest took %s",
		deployments, deployments*lines, batches, took.Round(time.Microsecond), len(writes), slowest.Round(time.Microsecond))
}
