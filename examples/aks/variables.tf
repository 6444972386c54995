variable "subscription_id" {
  type        = string
  description = "Azure subscription of the cluster and the identity. Null falls back to ARM_SUBSCRIPTION_ID."
  default     = null
}

variable "cluster_name" {
  type        = string
  description = "Name of the existing AKS cluster the agent is installed into. It must have the OIDC issuer and Workload Identity enabled."
}

variable "resource_group_name" {
  type        = string
  description = "Resource group of the cluster."
}

variable "identity_resource_group_name" {
  type        = string
  description = "Resource group the Jobs' managed identity is created in. Null uses the cluster's."
  default     = null
}

variable "runner_id" {
  type        = string
  description = "Id of the runner to register with the orchestrator: a DNS-1123 label of at most 63 characters (checked by module.names). provider::outpost::runner_id(...) makes one out of a cluster name."
}

variable "job_identity_name" {
  type        = string
  description = "Name of the user-assigned managed identity the Jobs run as (3 to 128 letters, digits, '-' and '_', a letter or digit first). Null derives it from the runner id: outpost-<runner_id>-job."
  default     = null

  validation {
    condition     = var.job_identity_name == null ? true : can(regex("^[a-zA-Z0-9][a-zA-Z0-9_-]{2,127}$", var.job_identity_name))
    error_message = "job_identity_name must be 3 to 128 letters, digits, '-' and '_', starting with a letter or digit."
  }
}

variable "job_role_assignments" {
  type = list(object({
    role_definition_name = string
    scope                = string
  }))
  description = "Azure roles granted to the Jobs' managed identity: what your deployments may do. Keep it least-privilege, e.g. [{ role_definition_name = \"Contributor\", scope = \"/subscriptions/<id>/resourceGroups/app-prod\" }]."
  default     = []
}

variable "kubelogin_login_mode" {
  type        = string
  description = "How kubelogin gets the Entra ID token for the cluster: `azurecli` (az login, for people), `workloadidentity` (CI with federated credentials, e.g. GitHub Actions), `spn` (service principal from AAD_SERVICE_PRINCIPAL_CLIENT_ID/SECRET) or `msi` (managed identity of the machine running Terraform)."
  default     = "azurecli"

  validation {
    condition     = contains(["azurecli", "workloadidentity", "spn", "msi"], var.kubelogin_login_mode)
    error_message = "kubelogin_login_mode must be azurecli, workloadidentity, spn or msi."
  }
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

variable "tags" {
  type        = map(string)
  description = "Tags of the Azure resources this stack creates."
  default     = {}
}
