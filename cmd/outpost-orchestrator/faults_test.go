package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/faulttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/pgtest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/release/releasetest"
)

// TestFaults is the orchestrator's part of the fault suite (`make faults`; `make test` runs the
// short version): what happens to deployments when the database under three orchestrator
// replicas goes away, and when the replicas themselves are upgraded one at a time. Every part is
// a real process, as in TestReplicaProcessesRunEachDeploymentOnce: three outpost-orchestrator
// processes over one PostgreSQL (durable, as it runs in production: a crash must not lose what
// it acknowledged) behind a TCP load balancer, six outpost-agent processes with the process
// executor and their job runners. Deployments are queued through the load balancer, one every
// loadGap, and the fault strikes when half are queued; queuing goes on meanwhile with the stock
// client. Every deployment must then run exactly once (counted by what its job did), succeed in
// its first attempt, and have its started and finished events and its log.
//
// After the deployments, a wake probe: with every agent idle and its long poll parked on some
// replica, one deployment per runner is queued straight through each replica in turn; each must
// be claimed within wakeBound. Most of them land on a replica other than the one the runner's
// poll waits on, so only the replicas' PostgreSQL listeners (LISTEN/NOTIFY, reconnected after
// the fault) can wake those polls; without them a poll sits out its 30 s.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault suite runs real processes for minutes; make test and make faults run it")
	}
	s := faulttest.NewSuite(t, "orchestrator-replicas")
	bins := buildBinaries(t)
	s.Run("PostgreSQL restarted (fast shutdown) under 3 replicas", func(t *testing.T) faulttest.Row {
		return databaseFault(t, bins, "fast shutdown", (*pgtest.Server).Restart)
	})
	s.Run("PostgreSQL killed (SIGKILL) under 3 replicas", func(t *testing.T) faulttest.Row {
		return databaseFault(t, bins, "SIGKILL of every server process", (*pgtest.Server).Crash)
	})
	s.Run("3 replicas upgraded one at a time from the previous build", func(t *testing.T) faulttest.Row {
		return rollingUpgrade(t, bins)
	})
	s.Report()
}

const (
	// loadGap is the pace deployments are queued at during a fault.
	loadGap = 100 * time.Millisecond
	// wakeBound is how long a deployment queued for an idle agent may wait to be claimed after
	// a fault (it is milliseconds when wakes reach every replica; a missed wake costs up to the
	// agent's 30 s poll).
	wakeBound = 5 * time.Second
)

// faultOptions are the fleet of the fault suite: plans of 0.5 s, every fifth of 4 s, so
// attempts are in flight (claimed, running, reporting) when the fault strikes.
func faultOptions(databaseURL string) fleetOptions {
	return fleetOptions{databaseURL: databaseURL, replicas: 3, runners: 6, maxConcurrency: 3, planSeconds: func(i int) string {
		if i%5 == 4 {
			return "4"
		}
		return "0.5"
	}}
}

// databaseFault restarts or crashes the PostgreSQL server under the replicas (same data
// directory and port) while deployments run, and measures how long each replica took to serve a
// database read again once the server accepted connections.
func databaseFault(t *testing.T, bins binaries, how string, fault func(*pgtest.Server, context.Context) (time.Duration, error)) faulttest.Row {
	pg, url := startPostgreSQLServer(t, true)
	f := newFleet(t, bins, faultOptions(url))
	defer f.stop()
	n := faulttest.Scale(30, 150)
	return f.underLoad(n, func() string {
		watch := f.watchReplicas()
		down, err := fault(pg, t.Context())
		if err != nil {
			// Not Fatal: this runs in the fault's own goroutine.
			t.Errorf("%s: %v", how, err)
			return "the database did not come back"
		}
		back := watch(time.Now())
		return fmt.Sprintf("database refused connections for %s (%s); every replica served reads again %s after (%s)",
			down.Round(10*time.Millisecond), how, maxDuration(back).Round(10*time.Millisecond), durations(back))
	})
}

// rollingUpgrade starts the replicas from the previous build (releasetest.PreviousForTest) and
// replaces them with this tree's binary one at a time, as a Deployment's rolling update does:
// SIGTERM, wait for the process to end, start the new one on the same address, wait until it
// answers, then the next. Old and new replicas share the database meanwhile.
func rollingUpgrade(t *testing.T, bins binaries) faulttest.Row {
	prev := releasetest.PreviousForTest(t, "../..")
	_, url := startPostgreSQLServer(t, true)
	old := binaries{orchestrator: prev.Bin("outpost-orchestrator"), agent: bins.agent}
	f := newFleet(t, old, faultOptions(url))
	defer f.stop()
	n := faulttest.Scale(30, 150)
	return f.underLoad(n, func() string {
		var took []time.Duration
		for i := range f.orchs {
			began := time.Now()
			f.replace(i, bins.orchestrator, fmt.Sprintf("orchestrator-%d-new", i+1))
			took = append(took, time.Since(began))
			time.Sleep(time.Second) // a rolling update waits for readiness, then a moment
		}
		return fmt.Sprintf("orchestrator %s → this tree, replica by replica (SIGTERM to answering: %s)", prev.Version, durations(took))
	})
}

// underLoad queues n deployments through the load balancer, one every loadGap, round-robin over
// the runners; when half are queued it runs fault in its own goroutine while queuing goes on.
// It waits until every deployment ended and counts them (fleet.check), then runs the wake
// probe. Recovery is from the end of the fault until every deployment queued by then ended.
func (f *fleet) underLoad(n int, fault func() (note string)) faulttest.Row {
	t := f.tb
	lb, err := client.NewAdminClient(f.lb.url(), fleetOrg, fleetToken)
	if err != nil {
		t.Fatal(err)
	}
	var (
		ids      []string
		note     string
		faultEnd time.Time
		done     = make(chan struct{})
		unsure   int
	)
	tick := time.NewTicker(loadGap)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		if i == n/2 {
			go func() {
				defer close(done)
				note = fault()
				faultEnd = time.Now()
			}()
		}
		id, ambiguous := f.createCarefully(lb, i, i%f.opts.runners)
		unsure += ambiguous
		ids = append(ids, id)
	}
	<-done
	f.waitFinished(n, 3*time.Minute)
	recovered := time.Since(faultEnd)
	probe, wake := f.wakeProbe(n)
	var r fleetRun
	f.check(append(ids, probe...), &r)
	if unsure > 0 {
		note += fmt.Sprintf("; %d creates cut off without an answer (looked up, then sent again only if absent)", unsure)
	}
	return faulttest.Row{Deployments: n + len(probe), Lost: r.lost, Twice: r.twice, EventsLost: r.eventsLost, Retried: r.retried,
		Recover: recovered, Note: fmt.Sprintf("%s; wake probe: %d idle runners' deployments claimed within %s (bound %s)", note, f.opts.runners, wake.Round(time.Millisecond), wakeBound)}
}

// createCarefully queues deployment i as a careful client does when the server may go away
// under it. The client retries what cannot have been applied (retry.Unapplied: a 503, a refused
// connection); a create whose connection was cut after it was sent (a replica's graceful
// shutdown closes its idle keep-alive connections, racing a request just sent on one) may or
// may not have been applied, so it looks the deployment up by its state key and sends the create
// again only if it is not there. It returns the id and 1 when it had to look.
func (f *fleet) createCarefully(admin *client.AdminClient, i, runner int) (string, int) {
	t := f.tb
	for tries := 0; tries < 5; tries++ {
		id, err := f.create(admin, i, runner)
		if err == nil {
			return id, min(tries, 1)
		}
		if !errors.Is(err, api.ErrUnavailable) {
			t.Fatalf("queue deployment %d through the load balancer: %v", i, err)
		}
		t.Logf("queue deployment %d: %v; looking it up before sending it again", i, err)
		var ds []api.Deployment
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
			var lerr error
			if ds, lerr = admin.ListDeployments(t.Context(), client.DeploymentFilter{RunnerID: fmt.Sprintf("r%d", runner)}); lerr == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("queue deployment %d: %v; then listing the runner's deployments for 30 s: %v", i, err, lerr)
			}
		}
		for _, d := range ds {
			if d.StateKey == fmt.Sprintf("run-%d", i) {
				return d.ID, 1
			}
		}
	}
	t.Fatalf("queue deployment %d: five creates cut off without an answer", i)
	return "", 0
}

// wakeProbe waits until every agent is idle, then queues one deployment per runner straight
// through each replica in turn and waits until they ended; it returns their ids and the longest
// time one waited to be claimed, and fails the test beyond wakeBound. The deployments get the
// run ids after the first `first`.
func (f *fleet) wakeProbe(first int) ([]string, time.Duration) {
	t := f.tb
	time.Sleep(2 * time.Second) // every agent's next long poll is parked by now
	var ids []string
	for k := range f.opts.runners {
		id, err := f.create(f.admins[k%len(f.admins)], first+k, k)
		if err != nil {
			t.Fatalf("wake probe: queue a deployment through replica %d: %v", k%len(f.admins)+1, err)
		}
		ids = append(ids, id)
	}
	f.waitFinished(first+len(ids), time.Minute)
	var longest time.Duration
	for _, id := range ids {
		d, err := f.admins[0].GetDeployment(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if d.ClaimedAt == nil {
			t.Errorf("wake probe: deployment %s (%s) was never claimed", id, d.Status)
			continue
		}
		longest = max(longest, d.ClaimedAt.Sub(d.CreatedAt))
	}
	if longest > wakeBound {
		t.Errorf("wake probe: a deployment queued for an idle runner waited %s to be claimed, want at most %s: a replica no longer hears the others' wakes", longest, wakeBound)
	}
	return ids, longest
}

// watchReplicas reads from every replica straight (not through the load balancer), every 20 ms
// and without retries, from now on. The func it returns takes the time the database accepted
// connections again and returns, per replica, how long after that it first answered a read.
func (f *fleet) watchReplicas() func(back time.Time) []time.Duration {
	type seen struct {
		mu  sync.Mutex
		oks []time.Time
	}
	ctx, cancel := context.WithCancel(f.tb.Context())
	var wg sync.WaitGroup
	obs := make([]*seen, len(f.orchs))
	for i, o := range f.orchs {
		admin, err := client.NewAdminClient(o.url, fleetOrg, fleetToken, client.WithRetryPolicy(client.RetryPolicy{MaxTries: 1}))
		if err != nil {
			f.tb.Fatal(err)
		}
		obs[i] = &seen{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := admin.GetRunner(ctx, "r0"); err == nil {
					obs[i].mu.Lock()
					obs[i].oks = append(obs[i].oks, time.Now())
					obs[i].mu.Unlock()
				}
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	return func(back time.Time) []time.Duration {
		out := make([]time.Duration, len(obs))
		deadline := time.Now().Add(time.Minute)
		for i, o := range obs {
			for {
				o.mu.Lock()
				var first time.Time
				for _, at := range o.oks {
					if !at.Before(back) {
						first = at
						break
					}
				}
				o.mu.Unlock()
				if !first.IsZero() {
					out[i] = first.Sub(back)
					break
				}
				if time.Now().After(deadline) {
					f.tb.Fatalf("replica %d served no read within a minute of the database's return", i+1)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		cancel()
		wg.Wait()
		return out
	}
}

func maxDuration(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// durations formats ds as "a, b, c", each rounded to 10 ms.
func durations(ds []time.Duration) string {
	s := ""
	for i, d := range ds {
		if i > 0 {
			s += ", "
		}
		s += d.Round(10 * time.Millisecond).String()
	}
	return s
}
