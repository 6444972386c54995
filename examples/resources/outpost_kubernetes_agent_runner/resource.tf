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
    namespace = "outpost-system"
  }
}

resource "outpost_kubernetes_agent_runner" "prod" {
  id               = "prod-cluster"
  description      = "Deployments into the prod cluster"
  public_keys      = [outpost_key_pair.runner.public_key_pem]
  state_storage_id = outpost_state_storage.cluster.id
  max_concurrency  = 10
  job_timeout      = "2h"

  job {
    namespace       = "outpost-jobs"
    service_account = "outpost-job"

    # Settings most runners need, without a pod template. Each wins over the template's value
    # of the same key; the chart's jobs.resources applies when neither sets resources.
    resources = {
      requests = { cpu = "500m", memory = "1Gi" }
      limits   = { memory = "4Gi" }
    }
    node_selector = { "kubernetes.io/os" = "linux" }
    tolerations = [
      { key = "dedicated", operator = "Equal", value = "iac", effect = "NoSchedule" },
    ]
    affinity = jsonencode({
      nodeAffinity = {
        requiredDuringSchedulingIgnoredDuringExecution = {
          nodeSelectorTerms = [{
            matchExpressions = [{ key = "kubernetes.io/arch", operator = "In", values = ["amd64", "arm64"] }]
          }]
        }
      }
    })
    env = [
      { name = "TF_LOG", value = "INFO" },
      # The job pod policy must allow the Secret (chart value jobs.policy.allowedSecrets).
      { name = "GITHUB_TOKEN", secret_key_ref = { name = "github", key = "token" } },
    ]
    labels      = { team = "platform" }
    annotations = { "example.com/cost-center" = "1234" }
    volumes = jsonencode([
      { name = "scratch", emptyDir = { sizeLimit = "5Gi" } },
    ])
    volume_mounts = [
      { name = "scratch", mount_path = "/scratch" },
    ]
    priority_class_name = "iac"

    # The container named "main" runs Terraform/OpenTofu; the runner sets its command. A
    # template carries whatever the settings above do not cover.
    pod_template = jsonencode({
      spec = {
        containers = [{
          name  = "main"
          image = "ghcr.io/opentofu/opentofu:1.10"
        }]
      }
    })
  }
}
