// Package api is the orchestrator API: wire types shared by the reference orchestrator, the
// provider and the agent, request validation and typed errors. The Go client that speaks it is
// package client. It imports neither terraform-plugin packages, nor request signing, nor
// Kubernetes types, so every side can share it without pulling in another's dependencies.
//
// Two audiences use the API. Admins (the provider, people, CI) authenticate with a bearer token
// and work under /api/v1/orgs/{org}/. Agents authenticate every request with a short-lived EdDSA
// JWT (package agentauth) and work under /api/v1/agent/. A running Job authenticates with the
// per-job token it was given and works under /api/v1/job/.
package api

import (
	"encoding/json"
	"time"
)

// Runner types.
const (
	// RunnerTypeKubernetesAgent is a runner served by an in-cluster Outpost agent.
	RunnerTypeKubernetesAgent = "kubernetes-agent"
)

// Runner is a registered runner of type kubernetes-agent.
type Runner struct {
	// ID is a DNS-1123 label, unique in the organisation.
	ID          string `json:"id"`
	Type        string `json:"type"`
	Description string `json:"description,omitempty"`
	// PublicKeys holds one or two PEM ed25519 public keys; two let a key rotate without downtime.
	PublicKeys     []string  `json:"public_keys"`
	Job            RunnerJob `json:"job"`
	StateStorageID string    `json:"state_storage_id"`
	// MaxConcurrency is how many jobs the agent may run at once.
	MaxConcurrency int `json:"max_concurrency"`
	// JobTimeoutSeconds bounds one job's run time.
	JobTimeoutSeconds int          `json:"job_timeout_seconds"`
	Status            RunnerStatus `json:"status"`
	CreatedAt         time.Time    `json:"created_at"`
	UpdatedAt         time.Time    `json:"updated_at"`
}

// RunnerJob says where and as whom the runner's Jobs run.
type RunnerJob struct {
	Namespace      string `json:"namespace"`
	ServiceAccount string `json:"service_account"`
	// PodTemplate is a Kubernetes PodTemplateSpec as JSON; it must have a container named "main".
	// Empty means the agent's defaults.
	PodTemplate string `json:"pod_template,omitempty"`
}

// RunnerStatus is what the orchestrator has observed of the runner's agent. Read-only.
type RunnerStatus struct {
	Connected bool `json:"connected"`
	// LastSeenAt is the time of the agent's last authenticated request; nil when never seen.
	LastSeenAt   *time.Time `json:"last_seen_at,omitempty"`
	AgentVersion string     `json:"agent_version,omitempty"`
	// KeyFingerprint is the fingerprint of the key the agent last signed with.
	KeyFingerprint string `json:"key_fingerprint,omitempty"`
}

// RunnerInput is the body of runner create (POST) and update (PUT). Fields left zero take
// defaults on create and are replaced on update (PUT is a full replacement of mutable fields).
type RunnerInput struct {
	ID                string    `json:"id"`
	Description       string    `json:"description,omitempty"`
	PublicKeys        []string  `json:"public_keys"`
	Job               RunnerJob `json:"job"`
	StateStorageID    string    `json:"state_storage_id"`
	MaxConcurrency    int       `json:"max_concurrency,omitempty"`
	JobTimeoutSeconds int       `json:"job_timeout_seconds,omitempty"`
}

// Defaults applied when a RunnerInput leaves a limit zero.
const (
	DefaultMaxConcurrency    = 5
	DefaultJobTimeoutSeconds = 3600
	MaxJobTimeoutSeconds     = 24 * 3600
	MaxMaxConcurrency        = 1000
)

// State storage types.
const (
	StateStorageKubernetes = "kubernetes"
	StateStorageS3         = "s3"
	StateStorageGCS        = "gcs"
	StateStorageAzureRM    = "azurerm"
)

// StateStorageTypes lists the valid state storage types.
var StateStorageTypes = []string{StateStorageKubernetes, StateStorageS3, StateStorageGCS, StateStorageAzureRM}

// StateStorage says where a runner's deployments keep their Terraform state. Exactly one of the
// type blocks is set, the one matching Type.
type StateStorage struct {
	ID          string               `json:"id"`
	Type        string               `json:"type"`
	Description string               `json:"description,omitempty"`
	Kubernetes  *KubernetesStateSpec `json:"kubernetes,omitempty"`
	S3          *S3StateSpec         `json:"s3,omitempty"`
	GCS         *GCSStateSpec        `json:"gcs,omitempty"`
	AzureRM     *AzureRMStateSpec    `json:"azurerm,omitempty"`
	CreatedAt   time.Time            `json:"created_at"`
	UpdatedAt   time.Time            `json:"updated_at"`
}

// KubernetesStateSpec keeps state in Secrets of a namespace, served by the agent.
type KubernetesStateSpec struct {
	Namespace string `json:"namespace"`
}

// S3StateSpec keeps state in an S3 bucket (Terraform's s3 backend).
type S3StateSpec struct {
	Bucket     string `json:"bucket"`
	Region     string `json:"region"`
	PathPrefix string `json:"path_prefix,omitempty"`
}

// GCSStateSpec keeps state in a Google Cloud Storage bucket (Terraform's gcs backend).
type GCSStateSpec struct {
	Bucket     string `json:"bucket"`
	PathPrefix string `json:"path_prefix,omitempty"`
}

// AzureRMStateSpec keeps state in an Azure Storage container (Terraform's azurerm backend).
type AzureRMStateSpec struct {
	StorageAccountName string `json:"storage_account_name"`
	ContainerName      string `json:"container_name"`
	ResourceGroupName  string `json:"resource_group_name,omitempty"`
	PathPrefix         string `json:"path_prefix,omitempty"`
}

// StateStorageInput is the body of state storage create (POST) and update (PUT).
type StateStorageInput struct {
	ID          string               `json:"id"`
	Type        string               `json:"type"`
	Description string               `json:"description,omitempty"`
	Kubernetes  *KubernetesStateSpec `json:"kubernetes,omitempty"`
	S3          *S3StateSpec         `json:"s3,omitempty"`
	GCS         *GCSStateSpec        `json:"gcs,omitempty"`
	AzureRM     *AzureRMStateSpec    `json:"azurerm,omitempty"`
}

// Operations a deployment can run.
const (
	OperationPlan    = "plan"
	OperationApply   = "apply"
	OperationDestroy = "destroy"
)

// Deployment statuses. Queued → Claimed → Running → one of the terminal ones. A lease that
// expires returns Claimed jobs, and Running plan jobs, to Queued with the next attempt; a Running
// apply or destroy becomes Lost instead, because re-running a half-done apply is not safe.
const (
	StatusQueued    = "queued"
	StatusClaimed   = "claimed"
	StatusRunning   = "running"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusCanceled  = "canceled"
	StatusLost      = "lost"
)

// IsTerminal reports whether a status is final.
func IsTerminal(status string) bool {
	switch status {
	case StatusSucceeded, StatusFailed, StatusCanceled, StatusLost:
		return true
	}
	return false
}

// Source is where a deployment's Terraform configuration comes from: exactly one of Inline or Git.
type Source struct {
	Inline *InlineSource `json:"inline,omitempty"`
	Git    *GitSource    `json:"git,omitempty"`
}

// InlineSource is a gzip-compressed tar archive of the configuration, base64 in JSON.
type InlineSource struct {
	ArchiveTarGz []byte `json:"archive_tar_gz"`
}

// GitSource is a git repository, a ref (branch, tag or commit) and a path inside it.
type GitSource struct {
	URL  string `json:"url"`
	Ref  string `json:"ref,omitempty"`
	Path string `json:"path,omitempty"`
}

// DeploymentInput is the body of deployment create.
type DeploymentInput struct {
	RunnerID  string `json:"runner_id"`
	Operation string `json:"operation"`
	Source    Source `json:"source"`
	// Variables are Terraform input variables; values are any JSON.
	Variables map[string]json.RawMessage `json:"variables,omitempty"`
	// StateKey names the state this deployment reads and writes.
	StateKey string `json:"state_key"`
	// TimeoutSeconds overrides the runner's job timeout when set.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
}

// Deployment is a queued or finished run of Terraform/OpenTofu on a runner.
type Deployment struct {
	ID             string                     `json:"id"`
	RunnerID       string                     `json:"runner_id"`
	Operation      string                     `json:"operation"`
	Source         Source                     `json:"source"`
	Variables      map[string]json.RawMessage `json:"variables,omitempty"`
	StateKey       string                     `json:"state_key"`
	TimeoutSeconds int                        `json:"timeout_seconds"`
	Status         string                     `json:"status"`
	// Attempt counts from 1; it grows when an expired lease returns the job to the queue.
	Attempt         int        `json:"attempt"`
	CancelRequested bool       `json:"cancel_requested,omitempty"`
	ExitCode        *int       `json:"exit_code,omitempty"`
	Reason          string     `json:"reason,omitempty"`
	Message         string     `json:"message,omitempty"`
	LogSize         int64      `json:"log_size"`
	LogTruncated    bool       `json:"log_truncated,omitempty"`
	CreatedAt       time.Time  `json:"created_at"`
	ClaimedAt       *time.Time `json:"claimed_at,omitempty"`
	StartedAt       *time.Time `json:"started_at,omitempty"`
	FinishedAt      *time.Time `json:"finished_at,omitempty"`
}

// Output is one Terraform output, as `terraform output -json` prints it.
type Output struct {
	Value     json.RawMessage `json:"value"`
	Type      json.RawMessage `json:"type,omitempty"`
	Sensitive bool            `json:"sensitive"`
}

// Outputs maps output names to values.
type Outputs map[string]Output

// Event is a recorded job event (from the agent), listed by the admin API.
type Event struct {
	Attempt  int       `json:"attempt"`
	Seq      int64     `json:"seq"`
	Type     string    `json:"type"`
	Result   string    `json:"result,omitempty"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Message  string    `json:"message,omitempty"`
	Time     time.Time `json:"time"`
}

// List wraps list responses so fields can be added later without breaking clients.
type List[T any] struct {
	Items []T `json:"items"`
}

// LogChunk is a slice of a deployment's log, from the admin API.
type LogChunk struct {
	Offset int64  `json:"offset"`
	Data   []byte `json:"data"`
	// NextOffset is where the next read should start.
	NextOffset int64 `json:"next_offset"`
	// Complete is true when the deployment is terminal and NextOffset is the end of the log.
	Complete  bool `json:"complete"`
	Truncated bool `json:"truncated,omitempty"`
}
