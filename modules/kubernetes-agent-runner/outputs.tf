output "runner_id" {
  description = "Id of the registered runner."
  value       = outpost_kubernetes_agent_runner.this.id
}

output "key_fingerprint" {
  description = "SHA-256 fingerprint of the runner's public key."
  value       = outpost_key_pair.this.fingerprint_sha256
}

output "private_key_secret" {
  description = "Namespace and name of the Secret holding the private key."
  value       = "${var.agent_namespace}/${outpost_key_pair.this.kubernetes_secret.name}"
}

output "state_storage_id" {
  description = "Id of the state storage the runner uses."
  value       = local.state_storage_id
}

output "agent_release_revision" {
  description = "Helm revision of the agent release."
  value       = outpost_kubernetes_agent.this.revision
}
