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
