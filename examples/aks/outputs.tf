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

output "job_identity_client_id" {
  description = "Client id of the managed identity the deployment Jobs run as (ARM_CLIENT_ID in the Jobs)."
  value       = azurerm_user_assigned_identity.job.client_id
}

output "job_identity_principal_id" {
  description = "Principal (object) id of the Jobs' managed identity, for further role assignments."
  value       = azurerm_user_assigned_identity.job.principal_id
}

output "job_subject" {
  description = "Kubernetes service account the federated credential trusts."
  value       = local.job_subject
}
