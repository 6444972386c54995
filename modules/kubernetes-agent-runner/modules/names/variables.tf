variable "runner_id" {
  type        = string
  description = "Id of the runner: a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit) of at most 63 characters."

  validation {
    condition     = length(var.runner_id) <= 63 && can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", var.runner_id))
    error_message = "runner_id \"${var.runner_id}\" (${length(var.runner_id)} characters) is not a valid runner id: use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit. To make one from a kube context or cluster name, use provider::outpost::runner_id(\"...\") (Terraform 1.8+, OpenTofu 1.7+)."
  }
}
