variable "region" {
  type        = string
  description = "AWS region of the EKS cluster (and the default region of the S3 state bucket)."
}

variable "cluster_name" {
  type        = string
  description = "Name of the existing EKS cluster the agent is installed into."
}

variable "runner_id" {
  type        = string
  description = "Id of the runner to register with the orchestrator: a DNS-1123 label of at most 63 characters (checked by module.names). provider::outpost::runner_id(...) makes one out of a cluster name."
}

variable "identity_mode" {
  type        = string
  description = "How the Jobs get their AWS role: `irsa` (IAM Roles for Service Accounts, through the cluster's OIDC provider and a service-account annotation) or `pod_identity` (EKS Pod Identity, through an association; needs the eks-pod-identity-agent add-on)."
  default     = "irsa"

  validation {
    condition     = contains(["irsa", "pod_identity"], var.identity_mode)
    error_message = "identity_mode must be \"irsa\" or \"pod_identity\"."
  }
}

variable "oidc_provider_arn" {
  type        = string
  description = "ARN of the cluster's IAM OIDC provider (IRSA only). Null looks it up by the cluster's issuer URL; the provider must already exist (eksctl utils associate-iam-oidc-provider, or your cluster module)."
  default     = null
}

variable "job_role_name" {
  type        = string
  description = "Name of the IAM role the deployment Jobs run with (at most 64 letters, digits and +=,.@_-). Null derives it from the runner id: outpost-<runner_id>-job, shortened with a hash when that is too long."
  default     = null

  validation {
    condition     = var.job_role_name == null ? true : can(regex("^[\\w+=,.@-]{1,64}$", var.job_role_name))
    error_message = "job_role_name must be 1 to 64 letters, digits and +=,.@_- (an IAM role name)."
  }
}

variable "job_policy_arns" {
  type        = list(string)
  description = "ARNs of the IAM policies attached to the Jobs' role: what your deployments may do in AWS. Keep it least-privilege; e.g. [\"arn:aws:iam::aws:policy/PowerUserAccess\"] only for a sandbox account."
  default     = []
}

variable "permissions_boundary_arn" {
  type        = string
  description = "ARN of a permissions boundary for the Jobs' role, or null."
  default     = null
}

variable "state_storage" {
  type        = string
  description = "Where the deployments keep their Terraform state: `kubernetes` (Secrets of the cluster, served by the agent) or `s3` (a bucket the Jobs' role is given access to)."
  default     = "kubernetes"

  validation {
    condition     = contains(["kubernetes", "s3"], var.state_storage)
    error_message = "state_storage must be \"kubernetes\" or \"s3\"."
  }
}

variable "state_bucket" {
  type        = string
  description = "Name of the existing S3 bucket for the state (state_storage = \"s3\")."
  default     = null

  validation {
    condition     = var.state_storage != "s3" || var.state_bucket != null
    error_message = "state_storage = \"s3\" needs state_bucket."
  }
}

variable "state_bucket_region" {
  type        = string
  description = "Region of the state bucket. Null uses `region`."
  default     = null
}

variable "state_path_prefix" {
  type        = string
  description = "Prefix of the state objects' keys in the bucket; the Jobs' role may only touch keys under it."
  default     = "outpost/"
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
  description = "Tags of the AWS resources this stack creates."
  default     = {}
}
