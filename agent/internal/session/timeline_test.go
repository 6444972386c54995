package session

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// sent lists the events of deployment "a" as "seq step reason" once each (the orchestrator keeps
// the first of each seq), and how many were sent in all.
func (f *fakeOrch) sent() (unique []string, total int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[int64]bool{}
	for _, ev := range f.events["a"] {
		if !seen[ev.Seq] {
			seen[ev.Seq] = true
			unique = append(unique, fmt.Sprintf("%d %s %s", ev.Seq, ev.Step, ev.Reason))
		}
	}
	return unique, len(f.events["a"])
}

// TestTimelineEventsOncePerStepAndReason: the session sends each step the executor sees and each
// reason the attempt waits for as one progress event, with a seq derived from the step or the
// reason, before the started and finished events; a reason the attempt waits for again is not
// sent again, and a new session (an agent restart) sends the same seqs, so the orchestrator keeps
// each once. To an orchestrator of an older protocol it sends no progress events.
func TestTimelineEventsOncePerStepAndReason(t *testing.T) {
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	unschedulable, _ := api.WaitingSeq(api.ReasonUnschedulable)
	pull, _ := api.WaitingSeq(api.ReasonImagePull)
	for _, protocol := range []int{api.ProtocolTimeline, api.ProtocolTimeline - 1} {
		t.Run(fmt.Sprintf("protocol %d", protocol), func(t *testing.T) {
			orch := &fakeOrch{max: 2, protocol: protocol, offers: []api.Offer{{DeploymentID: "a", Attempt: 1}}}
			ex := newFakeExec()
			newSession := func() *Session {
				return New(Options{Client: orch, Executor: ex, Logger: slog.New(slog.DiscardHandler), Instance: "agent-0", PollWait: time.Second,
					EventBackoff: retry.Backoff{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond}})
			}
			stop := run(t, newSession())
			waitFor(t, "the attempt started", func() bool { ex.mu.Lock(); defer ex.mu.Unlock(); return len(ex.starts) == 1 })
			waitFor(t, "a poll answer", func() bool { n, _ := orch.lastPoll(); return n > 1 })
			ex.set("a", func(s *executor.AttemptStatus) {
				s.Timeline = []executor.Step{{Step: api.StepJobCreated, Time: at}}
				s.Waiting = &executor.Waiting{Reason: api.ReasonUnschedulable, Message: "no node", Detail: "0/1 nodes are available"}
			})
			if protocol < api.ProtocolTimeline {
				time.Sleep(300 * time.Millisecond)
				if _, n := orch.sent(); n != 0 {
					t.Fatalf("%d progress events sent to an orchestrator of protocol %d", n, protocol)
				}
				stop()
				return
			}
			waitFor(t, "job_created and the wait for a node", func() bool { u, _ := orch.sent(); return len(u) == 2 })
			ex.set("a", func(s *executor.AttemptStatus) {
				s.Timeline = append(s.Timeline, executor.Step{Step: api.StepPodScheduled, Time: at.Add(time.Second), Node: "node-1"})
				s.Waiting = &executor.Waiting{Reason: api.ReasonImagePull, Message: "cannot pull", Detail: "401 Unauthorized"}
			})
			waitFor(t, "pod_scheduled and the wait for the image", func() bool { u, _ := orch.sent(); return len(u) == 4 })
			ex.set("a", func(s *executor.AttemptStatus) {
				s.Waiting = &executor.Waiting{Reason: api.ReasonUnschedulable, Message: "no node", Detail: "0/1 nodes are available"}
			})
			time.Sleep(200 * time.Millisecond)
			stop()
			_, before := orch.sent()
			if before != 4 {
				t.Fatalf("%d events sent, want 4 (a reason waited for again is not sent again)", before)
			}

			stop = run(t, newSession()) // the agent restarts
			ex.set("a", func(s *executor.AttemptStatus) {
				s.Timeline = append(s.Timeline, executor.Step{Step: api.StepPodInitialized, Time: at.Add(2 * time.Second)})
				s.Waiting, s.Started, s.Status, s.StartedAt = nil, true, api.StatusSucceeded, at.Add(3*time.Second)
				s.FinishedAt = at.Add(4 * time.Second)
			})
			waitFor(t, "the attempt cleaned up", func() bool { ex.mu.Lock(); defer ex.mu.Unlock(); return ex.cleaned["a"] == 1 })
			stop()
			unique, _ := orch.sent()
			want := []string{
				fmt.Sprintf("%d job_created ", api.SeqJobCreated), fmt.Sprintf("%d waiting unschedulable", unschedulable),
				fmt.Sprintf("%d pod_scheduled ", api.SeqPodScheduled), fmt.Sprintf("%d waiting image_pull", pull),
				fmt.Sprintf("%d pod_initialized ", api.SeqPodInitialized), fmt.Sprintf("%d cli_started ", api.SeqStarted), fmt.Sprintf("%d finished ", api.SeqFinished),
			}
			if !slices.Equal(unique, want) {
				t.Fatalf("events kept by seq:\n%q\nwant\n%q", unique, want)
			}
			orch.mu.Lock()
			defer orch.mu.Unlock()
			for _, ev := range orch.events["a"] {
				if ev.Step == api.StepPodScheduled && ev.Node != "node-1" {
					t.Errorf("pod_scheduled without its node: %+v", ev)
				}
				if ev.Seq == unschedulable && ev.Detail != "0/1 nodes are available" {
					t.Errorf("waiting event without the cluster's words: %+v", ev)
				}
			}
		})
	}
}
