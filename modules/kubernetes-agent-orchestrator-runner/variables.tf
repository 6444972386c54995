# The inputs of Humanitec's kubernetes-agent-orchestrator-runner module, under their names and with
# their defaults, so a call written for it works with only `source` changed. What each becomes in
# Outpost is in main.tf and the README.

variable "humanitec_org_id" {
  type        = string
  description = "Organisation of the runner (Humanitec's name for it). Must be the outpost provider's organisation (`org_id` or `OUTPOST_ORG_ID`); null takes the provider's."
  default     = null
}

variable "orchestrator_org_id" {
  type        = string
  description = "The same as `humanitec_org_id` (the newer name in Humanitec's module); it wins when both are set."
  default     = null
}

variable "runner_id" {
  type        = string
  description = "Id of the runner: a DNS-1123 label of at most 63 characters. `provider::outpost::runner_id(...)` makes one of a kube context name."
}

variable "private_key_path" {
  type        = string
  description = "Path of the runner's ed25519 private key (PEM, as `openssl genpkey -algorithm ed25519` writes it), relative to the directory Terraform runs in. The outpost provider reads it and writes it into a new Secret `<runner_id>-key` in `k8s_namespace`; only the path enters the state. Null (with `public_key_path` null too): the module generates a key pair whose private half only the cluster holds."
  default     = null
}

variable "public_key_path" {
  type        = string
  description = "Path of the public half of `private_key_path` (`openssl pkey -pubout`). The runner is registered with the public key derived from the private key; the plan fails if this file holds another key."
  default     = null
}

variable "k8s_namespace" {
  type        = string
  description = "Namespace of the agent and of the Secret holding its private key (created if missing)."
  default     = "platform-orchestrator-kubernetes-agent-runner-ns"
}

variable "k8s_service_account_name" {
  type        = string
  description = "Name of the agent's service account."
  default     = "platform-orchestrator-kubernetes-agent-runner"
}

variable "k8s_job_namespace" {
  type        = string
  description = "Namespace of the deployment Jobs (created if missing); the runner's states are kept there too, as Humanitec's module kept them, unless `state_namespace` says otherwise."
  default     = "platform-orchestrator-kubernetes-agent-runner-job-ns"
}

variable "k8s_job_service_account_name" {
  type        = string
  description = "Name of the Jobs' service account: the identity Terraform/OpenTofu runs with."
  default     = "platform-orchestrator-kubernetes-agent-runner-job"
}

variable "service_account_annotations" {
  type        = map(string)
  description = "Annotations of both service accounts, the agent's and the Jobs' (e.g. `eks.amazonaws.com/role-arn`), so a cloud identity given to the runner reaches the Terraform runs, as it did with Humanitec's runner. Outpost's agent itself needs none; `modules/kubernetes-agent-runner` sets the two apart."
  default     = {}
}

variable "pod_template" {
  type        = any
  description = "Pod template of the Jobs: the JSON string `jsonencode({...})` gives, or the object. Its container named `main` runs Terraform/OpenTofu; an image set on it must have `terraform` or `tofu` (Outpost copies its job runner into the pod, so Humanitec's runner image is not needed there)."
  default     = null
}

variable "extra_env_vars" {
  type = list(object({
    name  = string
    value = string
  }))
  description = "Environment variables of the agent. `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` (either case) become the agent's `proxy`, which job pods get too; `REMOTE_URL` is ignored (the agent talks to the outpost provider's `api_url`); the rest are set on the agent."
  default     = []
}

variable "kubernetes_agent_runner_chart_repository" {
  type        = string
  description = "Ignored: the agent chart is embedded in the outpost provider, so there is no chart repository to reach or mirror. Pin the provider's version instead. Setting it gives a warning."
  default     = null
}

variable "kubernetes_agent_runner_chart_version" {
  type        = string
  description = "Ignored: the chart's version is the outpost provider's. Setting it gives a warning; `runner_helm_chart_version` says which version is installed."
  default     = null
}

variable "kubernetes_agent_runner_image_repository" {
  type        = string
  description = "Ignored: it names Humanitec's runner image, which Outpost's chart must not run. Mirror `ghcr.io/outpost-dev/outpost-agent` and `ghcr.io/outpost-dev/outpost-job` instead and set `agent_image` and `job_image`. Setting it gives a warning."
  default     = null
}

variable "kubernetes_agent_runner_image_tag" {
  type        = string
  description = "Ignored, as `kubernetes_agent_runner_image_repository`. Setting it gives a warning."
  default     = null
}

# Outpost's own settings, for what Humanitec's module had no input for.

variable "state_namespace" {
  type        = string
  description = "Namespace of the state Secrets. Null: `k8s_job_namespace`, where Humanitec's module kept the states."
  default     = null
}

variable "agent_image" {
  type = object({
    registry    = optional(string)
    repository  = optional(string)
    tag         = optional(string)
    digest      = optional(string)
    pull_policy = optional(string)
  })
  description = "Image of Outpost's agent, for a mirror (see `modules/kubernetes-agent-runner`). Null: the provider release's image."
  default     = null
}

variable "job_image" {
  type = object({
    registry   = optional(string)
    repository = optional(string)
    tag        = optional(string)
    digest     = optional(string)
  })
  description = "Default image of the Jobs' `main` container, for a mirror (see `modules/kubernetes-agent-runner`). Null: the provider release's job image (OpenTofu)."
  default     = null
}

variable "wait_for_connection" {
  type        = bool
  description = "Wait until the installed agent has connected to the orchestrator."
  default     = true
}
