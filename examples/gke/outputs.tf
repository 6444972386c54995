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

output "job_google_service_account" {
  description = "E-mail of the Google service account the deployment Jobs run as."
  value       = google_service_account.job.email
}

output "job_subject" {
  description = "Kubernetes service account bound to the Google service account."
  value       = local.job_subject
}

output "workload_identity_member" {
  description = "IAM member of the Jobs' Kubernetes service account in the cluster's workload pool."
  value       = google_service_account_iam_member.job_workload_identity.member
}
