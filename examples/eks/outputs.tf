output "runner_id" {
  description = "Id of the registered runner."
  value       = module.runner.runner_id
}

output "key_fingerprint" {
  description = "SHA-256 fingerprint of the runner's public key (the private key is only in the cluster)."
  value       = module.runner.key_fingerprint
}

output "state_storage_id" {
  description = "Id of the state storage the runner's deployments use."
  value       = module.runner.state_storage_id
}

output "job_role_arn" {
  description = "ARN of the IAM role the deployment Jobs run with."
  value       = aws_iam_role.job.arn
}

output "job_subject" {
  description = "Kubernetes service account the role is bound to, as the `sub` of its token."
  value       = local.job_subject
}

output "identity_mode" {
  description = "How the Jobs get the role: irsa or pod_identity."
  value       = var.identity_mode
}
