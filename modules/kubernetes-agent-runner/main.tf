# The names derived from the runner id (and the one check of the id itself), shared with the
# cloud stacks of examples/.
module "names" {
  source = "./modules/names"

  runner_id = var.runner_id
}

locals {
  # Bring your own key: with public_key set, no key pair is generated and the agent reads the
  # private key from the Secret named in private_key_secret. With private_key_file or
  # private_key_pem, the key pair resource takes that key instead of generating one and writes
  # it into its Secret.
  generate_key = var.public_key == null
  own_key      = var.private_key_file != null || var.private_key_pem != null

  # pod_template takes what jsonencode() gives (a JSON string, as the Humanitec module took it)
  # or the object itself.
  pod_template = var.pod_template == null ? null : (can(tostring(var.pod_template)) ? tostring(var.pod_template) : jsonencode(var.pod_template))

  # The agent's own service account name is a chart value; agent_values, merged over it, win.
  user_values = yamldecode(coalesce(var.agent_values, "{}"))
  agent_values = var.agent_service_account_name == null ? var.agent_values : jsonencode(merge(local.user_values, {
    serviceAccount = merge({ name = var.agent_service_account_name }, try(local.user_values.serviceAccount, {}))
  }))
}

# The runner's identity. The private key is written straight into a Secret of the agent's
# namespace and never enters Terraform state (unless given as private_key_pem).
resource "outpost_key_pair" "this" {
  count = local.generate_key ? 1 : 0

  private_key_file    = var.private_key_file
  own_private_key_pem = var.private_key_pem

  kubernetes_secret {
    namespace        = var.agent_namespace
    name             = "${var.runner_id}-key"
    create_namespace = true
  }

  keepers = {
    rotation = var.key_rotation
  }
}

# The key pair was not counted before bring-your-own keys; its state moves without a new key.
moved {
  from = outpost_key_pair.this
  to   = outpost_key_pair.this[0]
}

# Where the runner's deployments keep their state, unless an existing storage is given.
resource "outpost_state_storage" "this" {
  count = var.state_storage_id == null ? 1 : 0

  id          = module.names.state_storage_id
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
  public_keys      = local.generate_key ? [outpost_key_pair.this[0].public_key_pem] : [var.public_key]
  state_storage_id = local.state_storage_id
  max_concurrency  = var.max_concurrency
  job_timeout      = var.job_timeout

  job {
    namespace       = var.job_namespace
    service_account = var.job_service_account
    pod_template    = local.pod_template
    resources       = var.job_resources
    tolerations     = var.job_tolerations
    env             = var.job_env
    node_selector   = var.job_node_selector
  }

  lifecycle {
    precondition {
      condition     = (var.public_key == null) == (var.private_key_secret == null)
      error_message = "public_key and private_key_secret go together: set both to bring your own key pair (the public half here, the Secret in agent_namespace holding the private half), or neither to let the module generate one."
    }
    precondition {
      condition     = !(local.own_key && var.public_key != null) && !(var.private_key_file != null && var.private_key_pem != null)
      error_message = "Give one private key: private_key_file or private_key_pem (the module derives the public key and writes the Secret), or public_key with private_key_secret (a Secret that exists)."
    }
  }
}

resource "outpost_kubernetes_agent" "this" {
  namespace                       = var.agent_namespace
  runner_id                       = outpost_kubernetes_agent_runner.this.id
  org_id                          = outpost_kubernetes_agent_runner.this.org_id
  create_namespaces               = true
  job_namespace                   = var.job_namespace
  job_service_account             = var.job_service_account
  job_service_account_annotations = var.job_service_account_annotations
  job_pod_labels                  = var.job_pod_labels
  service_account_annotations     = var.agent_service_account_annotations
  node_selector                   = var.agent_node_selector
  tolerations                     = var.agent_tolerations
  extra_env                       = var.agent_extra_env
  resources                       = var.agent_resources
  forward_env                     = var.forward_env
  serve_state                     = var.serve_state
  state_namespace                 = var.state_namespace
  values                          = local.agent_values
  wait_for_connection             = var.wait_for_connection

  private_key_secret {
    name = local.generate_key ? outpost_key_pair.this[0].kubernetes_secret.name : var.private_key_secret.name
    key  = local.generate_key ? null : var.private_key_secret.key
  }

  dynamic "image" {
    for_each = var.agent_image == null ? [] : [var.agent_image]
    content {
      registry    = image.value.registry
      repository  = image.value.repository
      tag         = image.value.tag
      digest      = image.value.digest
      pull_policy = image.value.pull_policy
    }
  }

  dynamic "job_image" {
    for_each = var.job_image == null ? [] : [var.job_image]
    content {
      registry   = job_image.value.registry
      repository = job_image.value.repository
      tag        = job_image.value.tag
      digest     = job_image.value.digest
    }
  }

  image_registry = var.image_registry
  dynamic "image_pull_secret" {
    for_each = var.image_pull_secret_name == null ? [] : [var.image_pull_secret_name]
    content {
      name               = image_pull_secret.value
      docker_config_json = var.image_pull_secret_docker_config_json
    }
  }

  lifecycle {
    precondition {
      condition     = var.org_id == null || var.org_id == outpost_kubernetes_agent_runner.this.org_id
      error_message = "org_id is \"${coalesce(var.org_id, "-")}\", but the outpost provider registers the runner in organisation \"${outpost_kubernetes_agent_runner.this.org_id}\" (its org_id or OUTPOST_ORG_ID). Set the provider's org_id to the same organisation, or leave org_id unset."
    }
  }

  dynamic "network_policy" {
    for_each = var.network_policy == null ? [] : [var.network_policy]
    content {
      enabled       = network_policy.value.enabled
      blocked_cidrs = network_policy.value.blocked_cidrs
      metrics_from  = network_policy.value.metrics_from == null ? null : (can(tostring(network_policy.value.metrics_from)) ? tostring(network_policy.value.metrics_from) : jsonencode(network_policy.value.metrics_from))
      extra_egress  = network_policy.value.extra_egress == null ? null : (can(tostring(network_policy.value.extra_egress)) ? tostring(network_policy.value.extra_egress) : jsonencode(network_policy.value.extra_egress))
    }
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
      pod_security_level          = job_pod_policy.value.pod_security_level
      allowed_sysctls             = job_pod_policy.value.allowed_sysctls
      allow_claim_sources         = job_pod_policy.value.allow_claim_sources
      allowed_claims              = job_pod_policy.value.allowed_claims
      allowed_priority_classes    = job_pod_policy.value.allowed_priority_classes
      allow_tolerate_all          = job_pod_policy.value.allow_tolerate_all
      allowed_runtime_classes     = job_pod_policy.value.allowed_runtime_classes
      allow_agent_labels          = job_pod_policy.value.allow_agent_labels
      pod_template                = job_pod_policy.value.pod_template == null ? null : (can(tostring(job_pod_policy.value.pod_template)) ? tostring(job_pod_policy.value.pod_template) : jsonencode(job_pod_policy.value.pod_template))
    }
  }
  dynamic "proxy" {
    for_each = var.proxy == null ? [] : [var.proxy]
    content {
      https    = proxy.value.https
      http     = proxy.value.http
      no_proxy = proxy.value.no_proxy
    }
  }

  dynamic "ca_bundle" {
    for_each = var.ca_bundle == null ? [] : [var.ca_bundle]
    content {
      pem         = ca_bundle.value.pem
      secret_name = ca_bundle.value.secret_name
      secret_key  = ca_bundle.value.secret_key
    }
  }

  dynamic "job_history" {
    for_each = var.job_history == null ? [] : [var.job_history]
    content {
      succeeded = job_history.value.succeeded
      failed    = job_history.value.failed
    }
  }

  dynamic "plugin_cache" {
    for_each = var.plugin_cache == null ? [] : [var.plugin_cache]
    content {
      claim_name = plugin_cache.value.claim_name
      volume     = plugin_cache.value.volume == null ? null : (can(tostring(plugin_cache.value.volume)) ? tostring(plugin_cache.value.volume) : jsonencode(plugin_cache.value.volume))
    }
  }

  dynamic "provider_installation" {
    for_each = var.provider_installation == null ? [] : [var.provider_installation]
    content {
      dynamic "network_mirror" {
        for_each = provider_installation.value.network_mirror == null ? [] : [provider_installation.value.network_mirror]
        content {
          url     = network_mirror.value.url
          include = network_mirror.value.include
          exclude = network_mirror.value.exclude
        }
      }
      dynamic "filesystem_mirror" {
        for_each = provider_installation.value.filesystem_mirror == null ? [] : [provider_installation.value.filesystem_mirror]
        content {
          path    = filesystem_mirror.value.path
          include = filesystem_mirror.value.include
          exclude = filesystem_mirror.value.exclude
        }
      }
      dynamic "direct" {
        for_each = provider_installation.value.direct == null ? [] : [provider_installation.value.direct]
        content {
          include = direct.value.include
          exclude = direct.value.exclude
        }
      }
    }
  }
}
