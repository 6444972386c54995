// Package api is the orchestrator API: wire types shared by the reference orchestrator, the
// provider and the agent, request validation and typed errors. The Go client that speaks it is
// package client. It imports neither terraform-plugin packages, nor request signing, nor
// Kubernetes types, so every side can share it without pulling in another's dependencies.
//
// Three kinds of caller use the API. Admins (the provider, people, CI) authenticate with a bearer
// token and work under /api/v1/orgs/{org}/. Agents authenticate every request with a short-lived
// EdDSA JWT (package agentauth) and work under /api/v1/agent/. The job runner of an attempt
// authenticates with the job token the claim granted and works under /api/v1/job/. The words
// (deployment, attempt, claim, event, …) are defined in the glossary of ARCHITECTURE.md.
package api

import "time"

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
	PublicKeys []string `json:"public_keys"`
	// RetiringKeys are keys an update took out of PublicKeys that are still accepted until the
	// agent signs with one of PublicKeys (or until their time is up), so replacing a key in one
	// update never locks out an agent that has not moved onto the new key yet. Read-only.
	RetiringKeys   []RetiringKey `json:"retiring_keys,omitempty"`
	Job            RunnerJob     `json:"job"`
	StateStorageID string        `json:"state_storage_id"`
	// MaxConcurrency is how many attempts the agent may run at once.
	MaxConcurrency int `json:"max_concurrency"`
	// JobTimeoutSeconds bounds the run time of one attempt (of its Job, or process).
	JobTimeoutSeconds int `json:"job_timeout_seconds"`
	// RequireApproval refuses every apply and destroy but the apply of an approved saved plan
	// (CodeApprovalRequired).
	RequireApproval bool         `json:"require_approval,omitempty"`
	Status          RunnerStatus `json:"status"`
	CreatedAt       time.Time    `json:"created_at"`
	UpdatedAt       time.Time    `json:"updated_at"`
}

// RetiringKey is a public key replaced by a runner update and still accepted for a while.
type RetiringKey struct {
	PublicKey   string `json:"public_key"`
	Fingerprint string `json:"fingerprint"`
	// Until is when it stops being accepted at the latest; the agent's first request signed with
	// a current key retires it sooner.
	Until time.Time `json:"until"`
}

// KeyRetirement is how long a replaced key stays accepted at most while the runner's agent has
// not yet signed with a current key: long enough for an agent that was offline during the
// rotation to come back and move over, short enough that an old key does not live on.
const KeyRetirement = 24 * time.Hour

// RunnerJob is the runner's job settings: where and as whom its Jobs run.
type RunnerJob struct {
	Namespace      string `json:"namespace"`
	ServiceAccount string `json:"service_account"`
	// PodTemplate is a Kubernetes PodTemplateSpec as JSON; its container named "main" runs the
	// CLI, and one is added when it names none. Empty means the agent's defaults.
	PodTemplate string `json:"pod_template,omitempty"`
	// Pod holds the runner's job pod settings, applied over PodTemplate (see JobPod); nil when
	// none is set.
	Pod *JobPod `json:"pod,omitempty"`
}

// RunnerStatus is what the orchestrator has observed of the runner's agent. Read-only.
type RunnerStatus struct {
	Connected bool `json:"connected"`
	// LastSeenAt is the time of the agent's last authenticated request; nil when never seen.
	LastSeenAt   *time.Time `json:"last_seen_at,omitempty"`
	AgentVersion string     `json:"agent_version,omitempty"`
	// KeyFingerprint is the fingerprint of the key the agent last signed with.
	KeyFingerprint string `json:"key_fingerprint,omitempty"`
	// LastRefusal is the last request of the runner's agent the orchestrator refused for a
	// reason retrying cannot fix: a key the runner does not have, or an agent protocol the
	// orchestrator does not speak. Kept after the agent is let in again; Refused says whether
	// it is still the news.
	LastRefusal *RunnerRefusal `json:"last_refusal,omitempty"`
}

// RunnerRefusal is one refused request of a runner's agent.
type RunnerRefusal struct {
	// Code is the refusal's error code: CodeUnknownKey or CodeIncompatibleProtocol.
	Code string    `json:"code"`
	At   time.Time `json:"at"`
	// KeyFingerprint is the key the refused request said it was signed with (unknown_key).
	KeyFingerprint string `json:"key_fingerprint,omitempty"`
	// AgentVersion is the release the refused agent reported (incompatible_protocol).
	AgentVersion string `json:"agent_version,omitempty"`
	// Message is the refusal as the agent got it.
	Message string `json:"message,omitempty"`
}

// Refused is the runner's last refusal when nothing of its agent got in since, nil otherwise.
// A refusal of a key the runner does not have says nothing on its own (anyone may send one), so
// the console and the CLI show it as the runner's state only while its agent is not connected.
func (s RunnerStatus) Refused() *RunnerRefusal {
	if s.LastRefusal == nil || s.LastSeenAt != nil && !s.LastRefusal.At.After(*s.LastSeenAt) {
		return nil
	}
	return s.LastRefusal
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
	// RequireApproval: see Runner.RequireApproval.
	RequireApproval bool `json:"require_approval,omitempty"`
	// RevokeReplacedKeys makes the keys this update takes out of PublicKeys stop being accepted
	// at once, instead of retiring when the agent moves onto a current key (RetiringKeys). For a
	// key that leaked; an agent still signing with it is locked out.
	RevokeReplacedKeys bool `json:"revoke_replaced_keys,omitempty"`
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
	// StateStorageInput is what was created or last put; its fields are the state storage's.
	StateStorageInput
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
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

// StateStorageInput is the body of state storage create (POST) and update (PUT), and what a
// StateStorage holds besides its timestamps.
type StateStorageInput struct {
	ID          string               `json:"id"`
	Type        string               `json:"type"`
	Description string               `json:"description,omitempty"`
	Kubernetes  *KubernetesStateSpec `json:"kubernetes,omitempty"`
	S3          *S3StateSpec         `json:"s3,omitempty"`
	GCS         *GCSStateSpec        `json:"gcs,omitempty"`
	AzureRM     *AzureRMStateSpec    `json:"azurerm,omitempty"`
}

// List wraps list responses so fields can be added later without breaking clients.
type List[T any] struct {
	Items []T `json:"items"`
}
