variable "runner_id" {
  type        = string
  description = "Id of the runner to register with the orchestrator (a DNS-1123 label)."
}

variable "description" {
  type        = string
  description = "Description of the runner."
  default     = null
}

variable "agent_namespace" {
  type        = string
  description = "Namespace of the agent and of the Secret holding its private key."
  default     = "outpost-system"
}

variable "job_namespace" {
  type        = string
  description = "Namespace the deployments' Jobs run in."
  default     = "outpost-jobs"
}

variable "job_service_account" {
  type        = string
  description = "Service account of the Jobs: the identity Terraform/OpenTofu runs with."
  default     = "outpost-job"
}

variable "job_service_account_annotations" {
  type        = map(string)
  description = "Annotations of the Jobs' service account, e.g. `eks.amazonaws.com/role-arn`, `iam.gke.io/gcp-service-account` or `azure.workload.identity/client-id`."
  default     = {}
}

variable "job_pod_labels" {
  type        = map(string)
  description = "Labels of the Job pods, e.g. `azure.workload.identity/use = \"true\"` for AKS Workload Identity."
  default     = {}
}

variable "pod_template" {
  type        = any
  description = "Pod template of the Jobs (a Kubernetes PodTemplateSpec as an object; it must have a container named \"main\"). Null uses the agent's defaults."
  default     = null
}

variable "state_storage_id" {
  type        = string
  description = "Id of an existing state storage. Null creates a `kubernetes` state storage in `state_namespace`."
  default     = null
}

variable "state_namespace" {
  type        = string
  description = "Namespace of the state Secrets when the module creates the state storage."
  default     = "outpost-state"
}

variable "serve_state" {
  type        = bool
  description = "Let the agent serve state from Kubernetes Secrets (state storages of type `kubernetes`). Turn off for s3, gcs or azurerm state storages."
  default     = true
}

variable "max_concurrency" {
  type        = number
  description = "How many deployments the runner runs at once."
  default     = 5
}

variable "job_timeout" {
  type        = string
  description = "Longest a deployment may run, as a duration (\"1h\", \"90m\")."
  default     = "1h"
}

variable "key_rotation" {
  type        = string
  description = "Change this value to generate a new key pair (rotation)."
  default     = "1"
}

variable "agent_values" {
  type        = string
  description = "Further chart values (YAML or JSON) for the agent, merged last."
  default     = null
}

variable "wait_for_connection" {
  type        = bool
  description = "Wait until the installed agent has connected to the orchestrator."
  default     = true
}

variable "job_pod_policy" {
  type = object({
    allow_host_namespaces       = optional(bool)
    allow_privileged            = optional(bool)
    allow_privilege_escalation  = optional(bool)
    allow_run_as_root           = optional(bool)
    allow_node_name             = optional(bool)
    allow_service_account_token = optional(bool)
    allowed_capabilities        = optional(list(string))
    allowed_volume_types        = optional(list(string))
    allowed_secrets             = optional(list(string))
    allowed_config_maps         = optional(list(string))
    pod_template                = optional(any)
  })
  description = "What the runner's pod template may ask for beyond Pod Security `restricted` (the agent refuses the rest), and optionally a pinned pod template (a PodTemplateSpec object) that replaces the runner's. Null keeps everything refused. See `outpost_kubernetes_agent`'s `job_pod_policy`."
  default     = null
}
