variable "runner_id" {
  type        = string
  description = "Id of the runner to register (a DNS-1123 label)."
  default     = "quickstart"
}

variable "agent_namespace" {
  type        = string
  description = "Namespace of the agent and of its private-key Secret."
  default     = "outpost-system"
}

variable "job_namespace" {
  type        = string
  description = "Namespace the deployments' Jobs run in."
  default     = "outpost-jobs"
}

variable "state_namespace" {
  type        = string
  description = "Namespace whose Secrets hold the deployments' Terraform state."
  default     = "outpost-state"
}

variable "wait_for_connection" {
  type        = bool
  description = "Wait until the installed agent has connected to the orchestrator. `make demo EXECUTOR=process` turns it off: its test bed has no real node, so it runs the agent as a local process instead."
  default     = true
}

variable "agent_values" {
  type        = string
  description = "Further values of the agent chart (YAML), for values no attribute sets. `make demo` sets it to let the agent reach the local orchestrator over plain http on the test bed's host-only network; a real installation reaches its orchestrator over https and needs none."
  default     = null
}

variable "key_rotation" {
  type        = string
  description = "Change this value to rotate the runner's key in one apply: the key Secret gets a new key, the runner the new public key, and the agent moves onto it without a restart (see outpost_key_pair, \"Rotating the key\")."
  default     = "1"
}

variable "image_registry" {
  type        = string
  description = "Registry (and path) of a private mirror of the Outpost images, e.g. registry.example.com/outpost (IMAGES.md says how to mirror a release). Null: the images' own registry, ghcr.io. `make demo` points it at the test bed's registry."
  default     = null
}

variable "image_pull_secret_name" {
  type        = string
  description = "Name of the Secret holding the login to image_registry, in the agent and jobs namespaces. Null: no login (a public registry)."
  default     = null
}

variable "image_pull_secret_docker_config_json" {
  type        = string
  description = "The Secret's .dockerconfigjson, jsonencode({auths = {\"<host>\" = {username = ..., password = ..., auth = base64encode(\"<username>:<password>\")}}}): the provider writes it into both namespaces. Null: the Secrets exist already."
  default     = null
  sensitive   = true
}
