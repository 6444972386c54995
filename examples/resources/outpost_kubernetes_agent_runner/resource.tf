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

    # The container named "main" runs Terraform/OpenTofu; the runner sets its command.
    pod_template = jsonencode({
      metadata = {
        labels = { team = "platform" }
      }
      spec = {
        containers = [{
          name = "main"
          resources = {
            requests = { cpu = "500m", memory = "512Mi" }
            limits   = { memory = "2Gi" }
          }
        }]
      }
    })
  }
}
