package api

import "fmt"

// The agent protocol is versioned apart from the releases: a release may change anything else
// and still speak the protocol of the one before, so an agent and an orchestrator of different
// releases work together as long as their ranges overlap. Each side states the range it speaks;
// the orchestrator picks the highest version both speak on every poll and refuses the poll with
// CodeIncompatibleProtocol when there is none.
//
// The versions:
//   - 1: the first.
//   - 2: a poll may state the runner keys the agent holds (key_fingerprints), and its answer
//     names the runner's current keys. An orchestrator of version 1 refuses a poll with the
//     field, so an agent states it only once an answer chose 2 (ProtocolKeyFingerprints).
//   - 3: events carry step, detail and node, and the agent sends the attempt's timeline as
//     progress events (job_created, pod_scheduled, pod_initialized, and one waiting event per
//     reason). An orchestrator of version 2 refuses an event with those fields, so the agent's
//     client leaves them out, folding detail into message, and the session sends no progress
//     events until an answer chose 3 (ProtocolTimeline).
//   - 4: saved plans: a placement may say save_plan or apply_plan. An agent of version 3 would
//     run a save_plan plan as a plain plan and an apply of a plan as a plain apply, so the
//     orchestrator offers such deployments only to agents whose poll chose 4 (ProtocolSavedPlans).
//   - 5: a poll's answer may hand the agent state operations (state_operations), and the agent
//     posts their results (POST /api/v1/agent/state-operations/{id}/result). The orchestrator
//     offers them only to agents whose poll chose 5 (ProtocolStateOperations).
//   - 6: several events, of any of the runner's attempts, in one request (EventBatch at
//     POST /api/v1/agent/events, one transaction for all), so a wave of attempts that end
//     together is reported in a few requests instead of one each. The agent batches only once
//     an answer chose 6 (ProtocolEventBatch), and sends the events one by one again if the batch
//     reaches an orchestrator replica without the route.
//   - 7: the claim in the poll answer. The orchestrator claims the attempts it would offer for
//     the polling instance, by the claim's own rule, and answers with the grants (claims)
//     instead of offers, so starting an attempt costs no claim request. Agents below 7 get
//     offers and claim them (POST …/claim) as before (ProtocolClaimInPoll).
const (
	// AgentProtocol is the newest agent protocol this build speaks.
	AgentProtocol = 7
	// MinAgentProtocol is the oldest agent protocol this build still speaks.
	MinAgentProtocol = 1
	// ProtocolKeyFingerprints is the version that brought key_fingerprints to polls and their
	// answers.
	ProtocolKeyFingerprints = 2
	// ProtocolTimeline is the version that brought the timeline: step, detail and node on
	// events, and progress events for each step and waiting reason.
	ProtocolTimeline = 3
	// ProtocolSavedPlans is the version that brought saved plans: Placement.SavePlan and
	// Placement.ApplyPlan.
	ProtocolSavedPlans = 4
	// ProtocolStateOperations is the version that brought state operations to poll answers.
	ProtocolStateOperations = 5
	// ProtocolEventBatch is the version that brought EventBatch.
	ProtocolEventBatch = 6
	// ProtocolClaimInPoll is the version that brought PollResponse.Claims.
	ProtocolClaimInPoll = 7
)

// ProtocolRange is the range of agent protocol versions one side speaks, both ends included.
type ProtocolRange struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// LegacyProtocol is the protocol of releases from before negotiation, which state no range and
// choose no version: the wire format of version 1 is theirs.
const LegacyProtocol = 1

// Stated is the range a peer stated, an empty one (a release from before negotiation) read as
// LegacyProtocol alone.
func (r ProtocolRange) Stated() ProtocolRange {
	if r == (ProtocolRange{}) {
		return ProtocolRange{Min: LegacyProtocol, Max: LegacyProtocol}
	}
	return r
}

// AgentProtocols is the range this build speaks.
func AgentProtocols() ProtocolRange { return ProtocolRange{Min: MinAgentProtocol, Max: AgentProtocol} }

// Valid reports whether the range names at least one version, counting from 1.
func (r ProtocolRange) Valid() bool { return r.Min >= 1 && r.Max >= r.Min }

// String is "1" or "1 to 3".
func (r ProtocolRange) String() string {
	if r.Min == r.Max {
		return fmt.Sprint(r.Min)
	}
	return fmt.Sprintf("%d to %d", r.Min, r.Max)
}

// Negotiate returns the highest version both ranges hold; ok is false when they do not overlap.
func Negotiate(a, b ProtocolRange) (version int, ok bool) {
	v := min(a.Max, b.Max)
	if !a.Valid() || !b.Valid() || v < max(a.Min, b.Min) {
		return 0, false
	}
	return v, true
}

// IncompatibleProtocolMessage says why an agent and an orchestrator cannot work together,
// naming both sides' releases and protocol ranges and which side to upgrade. Both sides use it,
// so the agent's log and the orchestrator's refusal read the same.
func IncompatibleProtocolMessage(agentVersion string, agent ProtocolRange, orchestratorVersion string, orch ProtocolRange) string {
	fix := "install an agent and an orchestrator of releases whose protocols overlap"
	switch {
	case agent.Valid() && orch.Valid() && agent.Min > orch.Max:
		fix = "upgrade the orchestrator, or install an agent of an older release (the chart of the provider that matches the orchestrator)"
	case agent.Valid() && orch.Valid() && agent.Max < orch.Min:
		fix = "upgrade the agent (outpost_kubernetes_agent installs the agent of the provider's release; upgrade the provider and apply)"
	}
	return fmt.Sprintf("agent %s speaks agent protocol %s, orchestrator %s speaks %s: no version in common; %s",
		orDev(agentVersion), agent, orDev(orchestratorVersion), orch, fix)
}

func orDev(v string) string {
	if v == "" {
		return "(version unknown)"
	}
	return v
}
