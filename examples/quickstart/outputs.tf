output "runner_id" {
  description = "The registered runner."
  value       = outpost_kubernetes_agent_runner.quickstart.id
}

output "key_fingerprint" {
  description = "SHA-256 fingerprint of the runner's public key."
  value       = outpost_key_pair.runner.fingerprint_sha256
}

output "agent_namespace" {
  description = "Namespace of the agent and of its key Secret."
  value       = outpost_kubernetes_agent.quickstart.namespace
}

output "private_key_secret" {
  description = "Name of the Secret that holds the runner's private key (never in Terraform state)."
  value       = outpost_key_pair.runner.kubernetes_secret.name
}

output "state_namespace" {
  description = "Namespace whose Secrets hold the deployments' state."
  value       = outpost_state_storage.cluster.kubernetes.namespace
}

output "agent_release_revision" {
  description = "Helm revision of the agent release."
  value       = outpost_kubernetes_agent.quickstart.revision
}
