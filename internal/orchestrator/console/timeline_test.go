package console

import (
	"slices"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// The steps the agent reads from Kubernetes carry whole seconds, the orchestrator's own steps do
// not: within one second the timeline keeps an attempt's life in order, not the raw times.
func TestTimelineKeepsTheStepsInOrderWithinASecond(t *testing.T) {
	at := func(ms int) time.Time { return time.Date(2026, 11, 27, 17, 17, 29, ms*int(time.Millisecond), time.UTC) }
	entries := []timelineEntry{
		{Time: at(0), Kind: "job created", attempt: 1, rank: stepRank(api.StepJobCreated)},
		{Time: at(0), Kind: "pod scheduled", attempt: 1, rank: stepRank(api.StepPodScheduled)},
		{Time: at(400), Kind: "queued", attempt: 1},
		{Time: at(450), Kind: "claimed", attempt: 1, rank: stepRank(api.StepClaimed)},
		{Time: at(1000), Kind: "pod initialized", attempt: 1, rank: stepRank(api.StepPodInitialized)},
		{Time: at(1500), Kind: "claimed (attempt 2)", attempt: 2, rank: stepRank(api.StepClaimed)},
		{Time: at(1000), Kind: "finished failed", attempt: 1, rank: stepRank(api.StepFinished)},
	}
	slices.SortStableFunc(entries, byTimeThenStep)
	var got []string
	for _, e := range entries {
		got = append(got, e.Kind)
	}
	want := []string{"queued", "claimed", "job created", "pod scheduled", "pod initialized", "finished failed", "claimed (attempt 2)"}
	if !slices.Equal(got, want) {
		t.Errorf("timeline %q, want %q", got, want)
	}
}
