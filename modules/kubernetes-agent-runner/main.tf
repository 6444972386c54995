# The runner's identity. The private key is written straight into a Secret of the agent's
# namespace and never enters Terraform state.
resource "outpost_key_pair" "this" {
  kubernetes_secret {
    namespace        = var.agent_namespace
    name             = "${var.runner_id}-key"
    create_namespace = true
  }

  keepers = {
    rotation = var.key_rotation
  }
}

# Where the runner's deployments keep their state, unless an existing storage is given.
resource "outpost_state_storage" "this" {
  count = var.state_storage_id == null ? 1 : 0

  id          = "${var.runner_id}-states"
  type        = "kubernetes"
  description = "State of runner ${var.runner_id}, in Secrets of ${var.state_namespace}"

  kubernetes {
    namespace = var.state_namespace
  }
}

locals {
  state_storage_id = var.state_storage_id != null ? var.state_storage_id : outpost_state_storage.this[0].id
}

resource "outpost_kubernetes_agent_runner" "this" {
  id               = var.runner_id
  description      = var.description
  public_keys      = [outpost_key_pair.this.public_key_pem]
  state_storage_id = local.state_storage_id
  max_concurrency  = var.max_concurrency
  job_timeout      = var.job_timeout

  job {
    namespace       = var.job_namespace
    service_account = var.job_service_account
    pod_template    = var.pod_template == null ? null : jsonencode(var.pod_template)
  }
}

resource "outpost_kubernetes_agent" "this" {
  namespace                       = var.agent_namespace
  runner_id                       = outpost_kubernetes_agent_runner.this.id
  create_namespaces               = true
  job_namespace                   = var.job_namespace
  job_service_account             = var.job_service_account
  job_service_account_annotations = var.job_service_account_annotations
  job_pod_labels                  = var.job_pod_labels
  serve_state                     = var.serve_state
  state_namespace                 = var.state_namespace
  values                          = var.agent_values
  wait_for_connection             = var.wait_for_connection

  private_key_secret {
    name = outpost_key_pair.this.kubernetes_secret.name
  }

  dynamic "job_pod_policy" {
    for_each = var.job_pod_policy == null ? [] : [var.job_pod_policy]
    content {
      allow_host_namespaces       = job_pod_policy.value.allow_host_namespaces
      allow_privileged            = job_pod_policy.value.allow_privileged
      allow_privilege_escalation  = job_pod_policy.value.allow_privilege_escalation
      allow_run_as_root           = job_pod_policy.value.allow_run_as_root
      allow_node_name             = job_pod_policy.value.allow_node_name
      allow_service_account_token = job_pod_policy.value.allow_service_account_token
      allowed_capabilities        = job_pod_policy.value.allowed_capabilities
      allowed_volume_types        = job_pod_policy.value.allowed_volume_types
      allowed_secrets             = job_pod_policy.value.allowed_secrets
      allowed_config_maps         = job_pod_policy.value.allowed_config_maps
      pod_template                = job_pod_policy.value.pod_template == null ? null : jsonencode(job_pod_policy.value.pod_template)
    }
  }
}
