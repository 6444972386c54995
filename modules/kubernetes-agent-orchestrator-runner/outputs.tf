# Humanitec's module's outputs.

output "runner_id" {
  description = "Id of the registered runner."
  value       = module.runner.runner_id

  precondition {
    condition     = (var.private_key_path == null) == (var.public_key_path == null)
    error_message = "private_key_path and public_key_path go together: give both (your key pair, as openssl made it), or neither to let the module generate a key pair."
  }
  precondition {
    condition     = var.public_key_path == null || trimspace(try(file(var.public_key_path), "")) == trimspace(module.runner.public_key_pem)
    error_message = "public_key_path (${coalesce(var.public_key_path, "-")}) does not hold the public half of private_key_path, or cannot be read. Make it with `openssl pkey -in ${coalesce(var.private_key_path, "private.pem")} -pubout -out ${coalesce(var.public_key_path, "public.pem")}`."
  }
}

output "k8s_namespace" {
  description = "Namespace of the agent."
  value       = var.k8s_namespace
}

output "k8s_job_namespace" {
  description = "Namespace of the deployment Jobs."
  value       = var.k8s_job_namespace
}

output "k8s_service_account" {
  description = "Service account of the agent."
  value       = var.k8s_service_account_name
}

output "k8s_job_service_account_name" {
  description = "Service account of the deployment Jobs."
  value       = var.k8s_job_service_account_name
}

output "runner_helm_chart_version" {
  description = "Version of the agent chart installed: the one the outpost provider embeds."
  value       = module.runner.agent_chart_version
}

# Outpost's.

output "org_id" {
  description = "Organisation the runner is registered in."
  value       = module.runner.org_id
}

output "state_storage_id" {
  description = "Id of the runner's state storage."
  value       = module.runner.state_storage_id
}

output "private_key_secret" {
  description = "Namespace and name of the Secret holding the private key."
  value       = module.runner.private_key_secret
}
