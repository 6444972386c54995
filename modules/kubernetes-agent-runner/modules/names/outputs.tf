output "runner_id" {
  description = "The runner id, checked."
  value       = var.runner_id
}

output "state_storage_id" {
  description = "Id of the runner's state storage (at most 63 characters)."
  value       = local.names.state_storage_id
}

output "aws_role_name" {
  description = "Name of the IAM role of the runner's Jobs (at most 64 characters)."
  value       = local.names.aws_role_name
}

output "gcp_service_account_id" {
  description = "account_id of the Google service account of the runner's Jobs (6 to 30 characters)."
  value       = local.names.gcp_service_account_id
}

output "azure_identity_name" {
  description = "Name of the user-assigned managed identity of the runner's Jobs (at most 128 characters)."
  value       = local.names.azure_identity_name
}

output "azure_federated_credential_name" {
  description = "Name of the federated identity credential that lets the runner's Jobs use that identity (at most 120 characters)."
  value       = local.names.azure_federated_credential_name
}
