package api

import (
	"fmt"
	"time"
)

// What the orchestrator knows of the states a kubernetes state storage keeps: the agent that
// serves the storage reports each state's kept versions and its lock, never the contents (no
// resource, attribute or output of a state ever leaves the cluster this way). The admin side
// reads it per state key.

// Limits of a state report.
const (
	// MaxReportedStates is the most states one report may carry; an agent sends more in
	// several reports.
	MaxReportedStates = 100
	// MaxReportedVersions is the most versions of one state a report may carry (the agent keeps
	// at most 100).
	MaxReportedVersions = 100
	maxReportedText     = 256
)

// StateVersion is the metadata of one kept version of a state.
type StateVersion struct {
	// Generation numbers the versions of a state in the cluster, increasing with every write.
	Generation int64 `json:"generation"`
	// Serial and Lineage are the state's own (empty for an OpenTofu client-side encrypted state).
	Serial  int64  `json:"serial"`
	Lineage string `json:"lineage,omitempty"`
	// Size is the state's size in bytes, uncompressed.
	Size int64 `json:"size"`
	// Resources is how many entries the state's resources list has.
	Resources int64 `json:"resources"`
	// DeploymentID and Attempt name the attempt that wrote it; empty for a version an operator
	// wrote in the cluster (`outpost-agent state restore` or `import`).
	DeploymentID string `json:"deployment_id,omitempty"`
	Attempt      int    `json:"attempt,omitempty"`
	// Source says how it was written: "write", "rollback to generation 3 by …", "import …".
	Source    string    `json:"source,omitempty"`
	WrittenAt time.Time `json:"written_at"`
}

// StateLock is who holds the lock of a state.
type StateLock struct {
	// DeploymentID, Attempt and Pod name the holder: the attempt and the job pod it runs in
	// (Pod is empty until the agent has seen the pod, and for the process executor).
	DeploymentID string `json:"deployment_id,omitempty"`
	Attempt      int    `json:"attempt,omitempty"`
	Pod          string `json:"pod,omitempty"`
	// Holder is the holder as the agent names it ("job/<deployment>/<attempt>", or an
	// operator's "admin/<who>").
	Holder string `json:"holder"`
	// Operation is the CLI's lock operation (OperationTypeApply, …).
	Operation  string    `json:"operation,omitempty"`
	AcquiredAt time.Time `json:"acquired_at"`
	// ExpiresAt is when the lock expires unless renewed: the agent renews it while the holder's
	// attempt runs, and releases it when the attempt ends.
	ExpiresAt time.Time `json:"expires_at"`
}

// StateLockBreak records the last time an operator broke a state's lock.
type StateLockBreak struct {
	// Holder and Pod are whose lock it was.
	Holder string `json:"holder"`
	Pod    string `json:"pod,omitempty"`
	// By and Reason are who broke it and why, as they gave them.
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// Live is whether the lock had not expired: its holder may still have been running.
	Live bool `json:"live"`
}

// ReportedState is one state of a state report: its kept versions, newest first, its lock, and
// the last break of its lock.
type ReportedState struct {
	StateKey      string          `json:"state_key"`
	Versions      []StateVersion  `json:"versions"`
	Lock          *StateLock      `json:"lock,omitempty"`
	LastLockBreak *StateLockBreak `json:"last_lock_break,omitempty"`
}

// StateReport is the body of an agent's state report (POST /api/v1/agent/states): states of the
// kubernetes state storage in Namespace, which must be the namespace of the runner's state
// storage. Each reported state replaces what the orchestrator knew of it.
type StateReport struct {
	Namespace string          `json:"namespace"`
	States    []ReportedState `json:"states"`
}

// State is what the orchestrator knows of one state of a state storage (admin side).
type State struct {
	StateStorageID string `json:"state_storage_id"`
	ReportedState
	// RunnerID is the runner whose agent reported it last, at ReportedAt.
	RunnerID   string    `json:"runner_id"`
	ReportedAt time.Time `json:"reported_at"`
	// Drift is set while the last drift check of the state key found changes.
	Drift *Drift `json:"drift,omitempty"`
}

// Validate checks a state report.
func (r *StateReport) Validate() error {
	if err := ValidateNamespace("namespace", r.Namespace); err != nil {
		return err
	}
	if len(r.States) > MaxReportedStates {
		return fieldErr("states", "%d states; at most %d per report", len(r.States), MaxReportedStates)
	}
	for i, st := range r.States {
		field := fmt.Sprintf("states[%d]", i)
		if err := ValidateStateKey(field+".state_key", st.StateKey); err != nil {
			return err
		}
		if len(st.Versions) > MaxReportedVersions {
			return fieldErr(field+".versions", "%d versions; at most %d", len(st.Versions), MaxReportedVersions)
		}
		for j, v := range st.Versions {
			vf := fmt.Sprintf("%s.versions[%d]", field, j)
			switch {
			case v.Generation < 1:
				return fieldErr(vf+".generation", "%d; generations count from 1", v.Generation)
			case v.Size < 0 || v.Resources < 0 || v.Serial < 0 || v.Attempt < 0:
				return fieldErr(vf, "serial, size, resources and attempt must not be negative")
			case len(v.Lineage) > maxReportedText || len(v.Source) > maxReportedText || len(v.DeploymentID) > maxReportedText:
				return fieldErr(vf, "lineage, source and deployment_id are at most %d bytes", maxReportedText)
			}
		}
		if b := st.LastLockBreak; b != nil && (len(b.Holder) > maxReportedText || len(b.Pod) > maxReportedText || len(b.By) > maxReportedText || len(b.Reason) > 4*maxReportedText) {
			return fieldErr(field+".last_lock_break", "holder, pod and by are at most %d bytes, reason %d", maxReportedText, 4*maxReportedText)
		}
		if l := st.Lock; l != nil {
			switch {
			case l.Holder == "":
				return fieldErr(field+".lock.holder", "is required")
			case len(l.Holder) > maxReportedText || len(l.Pod) > maxReportedText || len(l.Operation) > maxReportedText || len(l.DeploymentID) > maxReportedText:
				return fieldErr(field+".lock", "holder, pod, operation and deployment_id are at most %d bytes", maxReportedText)
			}
		}
	}
	return nil
}
