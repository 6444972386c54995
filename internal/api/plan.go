package api

// PlanAction is what a plan does to one resource or output.
type PlanAction string

// Plan actions, as a person reviewing a plan reads them. Terraform's ["delete","create"] and
// ["create","delete"] are both a replace; its "no-op" changes are left out of a summary.
const (
	PlanCreate  PlanAction = "create"
	PlanUpdate  PlanAction = "update"
	PlanReplace PlanAction = "replace"
	PlanDelete  PlanAction = "delete"
	PlanRead    PlanAction = "read"
	// PlanForget takes a resource out of the state without destroying it (a `removed` block).
	PlanForget PlanAction = "forget"
)

// PlanSummary is what a plan changes, by name only: resource addresses, actions, the names of the
// attributes that change and of the outputs, never a value. It is made in the cluster from the
// CLI's `show -json` of the plan and is all of the plan that leaves the cluster.
type PlanSummary struct {
	// Lineage and Serial name the state the plan was made against (from the plan file's prior
	// state); an apply of the plan is stale once the state's serial or lineage moved.
	Lineage string `json:"lineage,omitempty"`
	Serial  int64  `json:"serial"`
	// Counts adds up ResourceChanges by action.
	Counts PlanCounts `json:"counts"`
	// ResourceChanges are the resources the plan changes, in the CLI's order.
	ResourceChanges []ResourceChange `json:"resource_changes,omitempty"`
	// Drift are the changes made outside Terraform/OpenTofu that the plan's refresh found.
	Drift []ResourceChange `json:"drift,omitempty"`
	// OutputChanges are the root module's outputs the plan changes.
	OutputChanges []OutputChange `json:"output_changes,omitempty"`
}

// PlanCounts counts a plan's resource changes by action.
type PlanCounts struct {
	Create  int `json:"create"`
	Update  int `json:"update"`
	Replace int `json:"replace"`
	Delete  int `json:"delete"`
	Read    int `json:"read"`
	Forget  int `json:"forget"`
}

// Changes reports whether the plan changes any resource or output.
func (s PlanSummary) Changes() bool {
	return len(s.ResourceChanges) > 0 || len(s.OutputChanges) > 0
}

// ResourceChange is one resource a plan changes.
type ResourceChange struct {
	Address string `json:"address"`
	// PreviousAddress is set when the resource moved (a `moved` block or `state mv`).
	PreviousAddress string     `json:"previous_address,omitempty"`
	Action          PlanAction `json:"action"`
	// Reason is the CLI's action_reason (replace_because_tainted, delete_because_no_resource_config, …).
	Reason string `json:"reason,omitempty"`
	// ReplaceBecause names the attributes whose change forces the replacement.
	ReplaceBecause []string `json:"replace_because,omitempty"`
	// Attributes names the top-level attributes whose value changes or becomes known only on apply.
	Attributes []string `json:"attributes,omitempty"`
}

// OutputChange is one root-module output a plan changes. Sensitive outputs are named like the rest;
// no output's value is ever in a summary.
type OutputChange struct {
	Name      string     `json:"name"`
	Action    PlanAction `json:"action"`
	Sensitive bool       `json:"sensitive,omitempty"`
}
