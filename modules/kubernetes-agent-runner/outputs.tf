output "runner_id" {
  description = "Id of the registered runner."
  value       = outpost_kubernetes_agent_runner.this.id
}

output "key_fingerprint" {
  description = "SHA-256 fingerprint of the runner's key pair (generated, or from private_key_file or private_key_pem; null with public_key)."
  value       = one(outpost_key_pair.this[*].fingerprint_sha256)
}

output "private_key_secret" {
  description = "Namespace and name of the Secret holding the private key."
  value       = "${var.agent_namespace}/${local.generate_key ? outpost_key_pair.this[0].kubernetes_secret.name : var.private_key_secret.name}"
}

output "state_storage_id" {
  description = "Id of the state storage the runner uses."
  value       = local.state_storage_id
}

output "agent_release_revision" {
  description = "Helm revision of the agent release."
  value       = outpost_kubernetes_agent.this.revision
}

output "org_id" {
  description = "Organisation the runner is registered in (and the agent serves)."
  value       = outpost_kubernetes_agent_runner.this.org_id
}

output "agent_chart_version" {
  description = "Version of the agent chart installed (the one the provider embeds)."
  value       = outpost_kubernetes_agent.this.chart_version
}

output "public_key_pem" {
  description = "The public key the runner is registered with (PEM)."
  value       = local.generate_key ? outpost_key_pair.this[0].public_key_pem : var.public_key
}
