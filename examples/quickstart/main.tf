# The quickstart: everything a cluster needs to run deployments for the orchestrator, with the
# outpost provider alone.

# 1. The runner's identity. The private key goes straight into a Secret in the cluster and never
#    enters Terraform state; only the public half and its fingerprint do.
resource "outpost_key_pair" "runner" {
  kubernetes_secret {
    namespace        = var.agent_namespace
    name             = "${var.runner_id}-key"
    create_namespace = true
  }

  # Change key_rotation to rotate the key: one apply, no outage.
  keepers = {
    rotation = var.key_rotation
  }
}

# 2. Where deployments keep their state: Secrets of a namespace, served by the agent.
resource "outpost_state_storage" "cluster" {
  id          = "${var.runner_id}-states"
  type        = "kubernetes"
  description = "State of the quickstart's deployments, in the cluster's Secrets"

  kubernetes {
    namespace = var.state_namespace
  }
}

# 3. The runner registration: the public key, where Jobs run, and their limits.
resource "outpost_kubernetes_agent_runner" "quickstart" {
  id               = var.runner_id
  description      = "Quickstart runner on the local cluster"
  public_keys      = [outpost_key_pair.runner.public_key_pem]
  state_storage_id = outpost_state_storage.cluster.id
  max_concurrency  = 2
  job_timeout      = "30m"

  job {
    namespace       = var.job_namespace
    service_account = "outpost-job"
    pod_template = jsonencode({
      metadata = { labels = { "example.com/team" = "platform" } }
      spec = {
        containers = [{
          name      = "main"
          resources = { requests = { cpu = "100m", memory = "256Mi" } }
        }]
      }
    })
  }
}

# 4. The agent, installed from the chart embedded in the provider through the Helm SDK.
resource "outpost_kubernetes_agent" "quickstart" {
  namespace           = var.agent_namespace
  runner_id           = outpost_kubernetes_agent_runner.quickstart.id
  create_namespaces   = true
  job_namespace       = var.job_namespace
  job_service_account = "outpost-job"
  state_namespace     = var.state_namespace

  private_key_secret {
    name = outpost_key_pair.runner.kubernetes_secret.name
  }

  # A private mirror of the images (IMAGES.md), and the login every pod pulls with: the provider
  # keeps it as a Secret in the agent and jobs namespaces.
  image_registry = var.image_registry
  dynamic "image_pull_secret" {
    for_each = var.image_pull_secret_name == null ? [] : [var.image_pull_secret_name]
    content {
      name               = image_pull_secret.value
      docker_config_json = var.image_pull_secret_docker_config_json
    }
  }

  values              = var.agent_values
  wait_for_connection = var.wait_for_connection
}
