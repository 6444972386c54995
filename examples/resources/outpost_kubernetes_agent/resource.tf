# The whole runner in one apply: a key pair whose private half stays in the cluster, a state
# storage, the runner registration and the agent installed through the embedded Helm chart.

resource "outpost_key_pair" "runner" {
  kubernetes_secret {
    namespace        = "outpost-system"
    name             = "outpost-runner-key"
    create_namespace = true
  }
}

resource "outpost_state_storage" "cluster" {
  id   = "cluster-states"
  type = "kubernetes"

  kubernetes {
    namespace = "outpost-state"
  }
}

resource "outpost_kubernetes_agent_runner" "prod" {
  id               = "prod-cluster"
  public_keys      = [outpost_key_pair.runner.public_key_pem]
  state_storage_id = outpost_state_storage.cluster.id

  job {
    namespace = "outpost-jobs"
  }
}

resource "outpost_kubernetes_agent" "prod" {
  namespace         = "outpost-system"
  runner_id         = outpost_kubernetes_agent_runner.prod.id
  create_namespaces = true
  job_namespace     = "outpost-jobs"
  state_namespace   = "outpost-state"

  private_key_secret {
    name = "outpost-runner-key"
  }

  # The Jobs' cloud identity, separate from the agent's (EKS IRSA here).
  job_service_account_annotations = {
    "eks.amazonaws.com/role-arn" = "arn:aws:iam::123456789012:role/outpost-deployer"
  }

  # Behind an egress proxy: the agent and its job pods use it; the cluster's own addresses never do.
  proxy {
    https    = "http://proxy.internal:3128"
    no_proxy = [".internal"]
  }

  # The TLS-intercepting proxy's CA, trusted by the agent, Terraform/OpenTofu and git in job pods:
  # a Secret kept in both namespaces, or `pem = file("corp-ca.pem")` for the chart to write one.
  ca_bundle {
    secret_name = "corp-ca"
  }

  # Providers from the company's mirror only.
  provider_installation {
    network_mirror {
      url = "https://mirror.internal/terraform/providers/"
    }
  }

  # The agent's own variables, and which of them job pods get too.
  extra_env = [
    { name = "AWS_REGION", value = "eu-west-1" },
    { name = "TF_REGISTRY_CLIENT_TIMEOUT", value = "30" },
  ]
  forward_env = ["AWS_REGION", "TF_REGISTRY_CLIENT_TIMEOUT"]

  # The last 20 failed Jobs stay for `kubectl logs`; succeeded ones go at once.
  job_history {
    succeeded = 0
    failed    = 20
  }

  # What the runner's pod template may ask for beyond Pod Security "restricted": here, one
  # Secret of the jobs namespace. Anything else (host namespaces, hostPath, privileged, root,
  # other Secrets...) fails the deployment with a message naming the field.
  job_pod_policy {
    allowed_secrets = ["cloud-credentials"]
  }

  # Pull every image (agent pods, job pods' init container and main) from a private mirror of
  # the release (IMAGES.md); the provider keeps the login Secret in the agent and jobs namespaces.
  image_registry = "registry.example.com/outpost"
  image_pull_secret {
    name = "outpost-registry"
    docker_config_json = jsonencode({
      auths = {
        "registry.example.com" = {
          username = var.registry_username
          password = var.registry_password
          auth     = base64encode("${var.registry_username}:${var.registry_password}")
        }
      }
    })
  }

  # Any other chart value: the last resort; the attributes above win over the same keys.
  values = yamlencode({
    podAnnotations = { "example.com/team" = "platform" }
  })

  # Install, then wait up to the create timeout for the agent to connect to the orchestrator.
  wait_for_connection = true
  timeouts {
    create = "10m"
  }

  # The Secret must exist before the agent starts.
  depends_on = [outpost_key_pair.runner]
}

variable "registry_username" {
  type    = string
  default = "outpost-puller"
}

variable "registry_password" {
  type      = string
  sensitive = true
  default   = "example-only"
}
