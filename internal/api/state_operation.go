package api

import (
	"fmt"
	"strings"
	"time"
)

// State operations: show, diff and rollback of the versions a kubernetes state storage keeps,
// asked for on the admin side and run by the agent that serves the storage. The orchestrator
// cannot call the agent (it only connects outward), so an operation waits in the orchestrator
// until a poll of that agent hands it over (PollResponse.StateOperations), and the agent posts
// the result back. The agent reads the contents in the cluster; what comes back is names only
// (resource instance addresses, output names, generations and serials), never a value.

// StateOperationKind is what a state operation does.
type StateOperationKind string

// State operation kinds.
const (
	// StateOperationShow names the resource instances and outputs of one version.
	StateOperationShow StateOperationKind = "show"
	// StateOperationDiff names the resource instances and outputs added, removed and changed
	// from one version to another.
	StateOperationDiff StateOperationKind = "diff"
	// StateOperationRollback writes an old version back as the newest (the next serial, under
	// the state's lock).
	StateOperationRollback StateOperationKind = "rollback"
)

// StateOperationStatus is where a state operation stands.
type StateOperationStatus string

// State operation statuses: queued until an agent's poll takes it, running until the agent
// posts its result, then done or failed.
const (
	StateOperationQueued  StateOperationStatus = "queued"
	StateOperationRunning StateOperationStatus = "running"
	StateOperationDone    StateOperationStatus = "done"
	StateOperationFailed  StateOperationStatus = "failed"
)

// Terminal reports whether the operation has ended.
func (s StateOperationStatus) Terminal() bool {
	return s == StateOperationDone || s == StateOperationFailed
}

// StateOperationErrorCode says why a state operation failed.
type StateOperationErrorCode string

// State operation error codes.
const (
	// StateOpLocked: the state is locked (the error names the holder); wait for the run or
	// break its lock, then ask again.
	StateOpLocked StateOperationErrorCode = "locked"
	// StateOpNotFound: the state, or the generation asked for, is not kept (any more).
	StateOpNotFound StateOperationErrorCode = "not_found"
	// StateOpEncrypted: OpenTofu encrypted the state client-side; its contents cannot be read
	// in the cluster.
	StateOpEncrypted StateOperationErrorCode = "encrypted"
	// StateOpExpired: no agent took the operation, or none posted its result, in time.
	StateOpExpired StateOperationErrorCode = "expired"
	// StateOpRefused: the agent does not serve the state storage's namespace.
	StateOpRefused StateOperationErrorCode = "refused"
	// StateOpFailed: anything else; the message says what.
	StateOpFailed StateOperationErrorCode = "failed"
)

// StateOperationError is why a state operation failed.
type StateOperationError struct {
	Code    StateOperationErrorCode `json:"code"`
	Message string                  `json:"message"`
	// Lock names the holder when Code is locked.
	Lock *StateLock `json:"lock,omitempty"`
}

func (e *StateOperationError) Error() string { return string(e.Code) + ": " + e.Message }

// StateOperationInput is the body of a request for a state operation.
type StateOperationInput struct {
	Kind StateOperationKind `json:"kind"`
	// Generation is the version shown, the one a diff starts from, or the one rolled back to
	// (0 for show: the current one).
	Generation int64 `json:"generation,omitempty"`
	// ToGeneration is the version a diff goes to (0: the current one).
	ToGeneration int64 `json:"to_generation,omitempty"`
	// Reason says why; a rollback needs one, and it is recorded with the operation and with
	// the version the rollback writes.
	Reason string `json:"reason,omitempty"`
}

// StateOperationRequest is the body of POST /api/v1/orgs/{org}/state-storages/{id}/operations:
// the state and what to do with it.
type StateOperationRequest struct {
	StateKey string `json:"state_key"`
	StateOperationInput
}

// Validate checks a state operation request.
func (in *StateOperationRequest) Validate() error {
	if err := ValidateStateKey("state_key", in.StateKey); err != nil {
		return err
	}
	return in.StateOperationInput.Validate()
}

// MaxStateOperationReason bounds a state operation's reason.
const MaxStateOperationReason = 1024

// Validate checks what a state operation is to do.
func (in *StateOperationInput) Validate() error {
	switch in.Kind {
	case StateOperationShow, StateOperationDiff, StateOperationRollback:
	default:
		return fieldErr("kind", "%q is not a state operation; use show, diff or rollback", in.Kind)
	}
	switch {
	case in.Generation < 0 || in.ToGeneration < 0:
		return fieldErr("generation", "generations count from 1 (0: the current one)")
	case len(in.Reason) > MaxStateOperationReason:
		return fieldErr("reason", "is %d bytes; at most %d", len(in.Reason), MaxStateOperationReason)
	case in.Kind == StateOperationRollback && in.Generation == 0:
		return fieldErr("generation", "is required for a rollback: the generation to roll back to (outpost state versions lists them)")
	case in.Kind == StateOperationRollback && strings.TrimSpace(in.Reason) == "":
		return fieldErr("reason", "is required for a rollback: it is recorded with the operation and the version it writes")
	case in.Kind == StateOperationDiff && in.Generation == 0:
		return fieldErr("generation", "is required for a diff: the generation it starts from")
	case in.Kind != StateOperationDiff && in.ToGeneration != 0:
		return fieldErr("to_generation", "is only for a diff")
	}
	return nil
}

// StateOperation is a state operation and, once it ended, its result (admin side).
type StateOperation struct {
	ID             string `json:"id"`
	StateStorageID string `json:"state_storage_id"`
	StateKey       string `json:"state_key"`
	StateOperationInput
	// RequestedBy names the admin token that asked: "token <name> (<id>)", or "admin" for the
	// bootstrap admin token.
	RequestedBy string               `json:"requested_by"`
	Status      StateOperationStatus `json:"status"`
	// RunnerID is the runner whose agent took the operation.
	RunnerID  string     `json:"runner_id,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// ExpiresAt is when the operation fails with the error expired unless it ended.
	ExpiresAt time.Time `json:"expires_at"`
	StateOperationOutcome
}

// StateOperationOutcome is what an ended operation found: its error, or the result of its kind.
type StateOperationOutcome struct {
	Error    *StateOperationError `json:"error,omitempty"`
	Show     *StateContents       `json:"show,omitempty"`
	Diff     *StateDiff           `json:"diff,omitempty"`
	Rollback *StateRolledBack     `json:"rollback,omitempty"`
}

// StateContents names what one version of a state holds: never a value.
type StateContents struct {
	Generation int64  `json:"generation"`
	Serial     int64  `json:"serial"`
	Lineage    string `json:"lineage,omitempty"`
	// Resources are the addresses of the resource instances, sorted.
	Resources []string `json:"resources"`
	// Outputs are the root outputs by name, sorted; their values are never shown.
	Outputs []StateOutputName `json:"outputs"`
}

// StateOutputName is an output of a state by name.
type StateOutputName struct {
	Name      string `json:"name"`
	Sensitive bool   `json:"sensitive,omitempty"`
}

// StateDiff names the resource instances and outputs added, removed and changed from one
// version to another.
type StateDiff struct {
	From           int64    `json:"from"`
	To             int64    `json:"to"`
	FromSerial     int64    `json:"from_serial"`
	ToSerial       int64    `json:"to_serial"`
	Added          []string `json:"added"`
	Removed        []string `json:"removed"`
	Changed        []string `json:"changed"`
	OutputsAdded   []string `json:"outputs_added"`
	OutputsRemoved []string `json:"outputs_removed"`
	OutputsChanged []string `json:"outputs_changed"`
}

// StateRolledBack is the version a rollback wrote.
type StateRolledBack struct {
	Generation int64 `json:"generation"`
	Serial     int64 `json:"serial"`
}

// StateOperationOffer is a state operation as a poll hands it to the agent: what it needs to
// run it, and the namespace of the state storage.
type StateOperationOffer struct {
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	StateKey  string `json:"state_key"`
	StateOperationInput
	RequestedBy string `json:"requested_by"`
}

// StateOperationResult is the body of the agent's result of a state operation
// (POST /api/v1/agent/state-operations/{id}/result): done with the result of the kind, or
// failed with an error.
type StateOperationResult struct {
	Status StateOperationStatus `json:"status"`
	StateOperationOutcome
}

// Bounds of a result: a state may have many resources, but names are short.
const (
	maxResultNames = 100000
	maxResultName  = 4096
)

// Validate checks a result of an operation of kind k.
func (r *StateOperationResult) Validate(k StateOperationKind) error {
	switch r.Status {
	case StateOperationFailed:
		if r.Error == nil || r.Error.Code == "" {
			return fieldErr("error", "a failed operation says why")
		}
		if len(r.Error.Message) > 4*maxResultName {
			return fieldErr("error.message", "is %d bytes; at most %d", len(r.Error.Message), 4*maxResultName)
		}
		return nil
	case StateOperationDone:
	default:
		return fieldErr("status", "%q; a result is done or failed", r.Status)
	}
	var lists [][]string
	switch {
	case k == StateOperationShow && r.Show != nil:
		lists = append(lists, r.Show.Resources)
		names := make([]string, len(r.Show.Outputs))
		for i, o := range r.Show.Outputs {
			names[i] = o.Name
		}
		lists = append(lists, names)
	case k == StateOperationDiff && r.Diff != nil:
		d := r.Diff
		lists = append(lists, d.Added, d.Removed, d.Changed, d.OutputsAdded, d.OutputsRemoved, d.OutputsChanged)
	case k == StateOperationRollback && r.Rollback != nil:
	default:
		return fieldErr(string(k), "a done %s operation carries its %s result", k, k)
	}
	n := 0
	for _, l := range lists {
		n += len(l)
		for i, s := range l {
			if len(s) > maxResultName {
				return fieldErr(fmt.Sprintf("%s[%d]", k, i), "a name of %d bytes; at most %d", len(s), maxResultName)
			}
		}
	}
	if n > maxResultNames {
		return fieldErr(string(k), "%d names; at most %d", n, maxResultNames)
	}
	return nil
}
