variable "project_id" {
  type        = string
  description = "Google Cloud project of the Jobs' service account and of the roles granted to it."
}

variable "cluster_name" {
  type        = string
  description = "Name of the existing GKE cluster the agent is installed into. It must have Workload Identity enabled."
}

variable "cluster_location" {
  type        = string
  description = "Region or zone of the cluster, e.g. `europe-west3`."
}

variable "cluster_project_id" {
  type        = string
  description = "Project of the cluster, when it is not `project_id`."
  default     = null
}

variable "runner_id" {
  type        = string
  description = "Id of the runner to register with the orchestrator: a DNS-1123 label of at most 63 characters (checked by module.names). provider::outpost::runner_id(...) makes one out of a cluster name."
}

variable "job_service_account_id" {
  type        = string
  description = "account_id of the Google service account the Jobs run as (6 to 30 lower-case letters, digits and '-', a letter first, no '-' last). Null derives it from the runner id: outpost-<runner_id>-job, shortened with a hash when that is too long."
  default     = null

  validation {
    condition     = var.job_service_account_id == null ? true : can(regex("^[a-z][-a-z0-9]{4,28}[a-z0-9]$", var.job_service_account_id))
    error_message = "job_service_account_id must be 6 to 30 lower-case letters, digits and '-', starting with a letter and not ending with '-'."
  }
}

variable "job_project_roles" {
  type        = list(string)
  description = "Project roles granted to the Jobs' Google service account in `project_id`: what your deployments may do. Keep it least-privilege, e.g. [\"roles/storage.admin\", \"roles/cloudsql.admin\"]."
  default     = []
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

variable "wait_for_connection" {
  type        = bool
  description = "Wait until the installed agent has connected to the orchestrator."
  default     = true
}
