package client_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// flakyProxy forwards to the orchestrator, or, while down, drops every connection without an
// answer: what a client sees when a network path or a load balancer goes away.
type flakyProxy struct {
	down atomic.Bool
	next http.Handler
}

func (p *flakyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.down.Load() {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	p.next.ServeHTTP(w, r)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestFollowLogsResumesAfterTheConnectionDrops follows a deployment through a proxy that drops
// every connection for a while: the follower retries with backoff and resumes at its offset, so
// the log it copies is the whole log, once, and it returns the final deployment.
func TestFollowLogsResumesAfterTheConnectionDrops(t *testing.T) {
	o := orchestratortest.Start(t)
	admin, err := client.NewAdminClient(o.URL, "acme", o.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	ag := clienttest.Register(t, admin, o.URL, "eu-1")
	dep, err := admin.CreateDeployment(t.Context(), api.DeploymentInput{RunnerID: "eu-1", Operation: api.OperationApply, StateKey: "apps/web",
		Source: api.Source{Git: &api.GitSource{URL: "https://git.example.com/infra.git"}}})
	if err != nil {
		t.Fatal(err)
	}
	run := ag.Start(t, dep.ID)
	run.Log(t, "first line\n")

	target, _ := url.Parse(o.URL)
	proxy := &flakyProxy{next: httputil.NewSingleHostReverseProxy(target)}
	ps := httptest.NewServer(proxy)
	defer ps.Close()
	// One try per request, so the follower's own resumption is what carries it over the outage.
	follower, err := client.NewAdminClient(ps.URL, "acme", o.AdminToken,
		client.WithRetryPolicy(client.RetryPolicy{MaxTries: 1, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	var out clienttest.Buffer
	var retries atomic.Int32
	type result struct {
		next int64
		dep  *api.Deployment
		err  error
	}
	done := make(chan result, 1)
	go func() {
		next, final, err := follower.FollowLogs(context.Background(), dep.ID, &out, client.FollowOptions{
			Interval: 10 * time.Millisecond,
			OnRetry:  func(error, time.Duration) { retries.Add(1) },
		})
		done <- result{next, final, err}
	}()
	waitFor(t, "the first line to be followed", func() bool { return out.String() == "first line\n" })
	proxy.down.Store(true)
	waitFor(t, "the follower to retry", func() bool { return retries.Load() >= 2 })
	run.Log(t, "written while the follower was cut off\n")
	proxy.down.Store(false)
	run.Log(t, "last line\n")
	run.Finish(t, api.StatusSucceeded, 0)

	r := <-done
	want := "first line\nwritten while the follower was cut off\nlast line\n"
	if r.err != nil || r.dep == nil || r.dep.Status != api.StatusSucceeded {
		t.Fatalf("FollowLogs: %+v, %v", r.dep, r.err)
	}
	if out.String() != want || r.next != int64(len(want)) {
		t.Fatalf("followed %q up to offset %d, want %q", out.String(), r.next, want)
	}

	// A refusal is not retried: following an unknown deployment ends at once.
	before := retries.Load()
	_, _, err = follower.FollowLogs(t.Context(), "dep-unknown", &out, client.FollowOptions{OnRetry: func(error, time.Duration) { retries.Add(1) }})
	if !errors.Is(err, api.ErrNotFound) || retries.Load() != before {
		t.Fatalf("following an unknown deployment: %v after %d retries", err, retries.Load()-before)
	}
}

// TestUploadProgressCountsTheBody creates a deployment with a 2 MiB inline source and checks
// that the progress callback saw the whole body go out, in order.
func TestUploadProgressCountsTheBody(t *testing.T) {
	o := orchestratortest.Start(t)
	var mu sync.Mutex
	var seen [][2]int64
	admin, err := client.NewAdminClient(o.URL, "acme", o.AdminToken, client.WithUploadProgress(func(sent, total int64) {
		mu.Lock()
		seen = append(seen, [2]int64{sent, total})
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	clienttest.Register(t, admin, o.URL, "eu-1")
	mu.Lock()
	seen = nil // the registration's small bodies
	mu.Unlock()
	archive := make([]byte, 2<<20)
	_, _ = rand.Read(archive)
	archive[0], archive[1] = 0x1f, 0x8b
	if _, err := admin.CreateDeployment(t.Context(), api.DeploymentInput{RunnerID: "eu-1", Operation: api.OperationPlan, StateKey: "apps/web",
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: archive}}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 2 {
		t.Fatalf("progress was reported %d times for a 2 MiB body", len(seen))
	}
	last := seen[len(seen)-1]
	if last[0] != last[1] || last[1] < int64(len(archive)) {
		t.Fatalf("last progress %d of %d; the body holds more than %d bytes", last[0], last[1], len(archive))
	}
	for i := 1; i < len(seen); i++ {
		if seen[i][0] <= seen[i-1][0] {
			t.Fatalf("progress went from %d to %d", seen[i-1][0], seen[i][0])
		}
	}
}
