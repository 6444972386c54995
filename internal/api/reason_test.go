package api

import "testing"

// TestWaitingSeqsStayPut: a waiting event's seq comes from its reason's place in Reasons, which
// agents of other releases share: moving a reason would make a restarted agent send an old wait
// as new. The first and last seqs are pinned here.
func TestWaitingSeqsStayPut(t *testing.T) {
	for r, want := range map[Reason]int64{ReasonExitCode: 100, ReasonUnschedulable: 103, ReasonImagePull: 104, ReasonRunnerDeleted: 118} {
		if got, ok := WaitingSeq(r); !ok || got != want {
			t.Errorf("WaitingSeq(%s) = %d, %v; want %d", r, got, ok, want)
		}
	}
	if _, ok := WaitingSeq("made_up"); ok {
		t.Error("an unknown reason has a seq")
	}
}

// TestWithoutTimelineKeepsTheClustersWords: the event an older orchestrator takes has no step,
// node or detail, and its message carries the detail unless it holds it already.
func TestWithoutTimelineKeepsTheClustersWords(t *testing.T) {
	ev := Event{Step: StepFinished, Node: "n", Reason: ReasonOOMKilled, Message: "main was killed", Detail: "OOMKilled: memory limit 32Mi"}
	got := ev.WithoutTimeline()
	if got.Step != "" || got.Node != "" || got.Detail != "" || got.Message != "main was killed: OOMKilled: memory limit 32Mi" || got.Reason != ReasonOOMKilled {
		t.Errorf("older shape %+v", got)
	}
	ev.Message = "cannot pull: 401 Unauthorized"
	ev.Detail = "401 Unauthorized"
	if got := ev.WithoutTimeline(); got.Message != "cannot pull: 401 Unauthorized" {
		t.Errorf("detail repeated in %q", got.Message)
	}
}
