# State in Kubernetes Secrets of the cluster, served to the deployments by the agent.
resource "outpost_state_storage" "cluster" {
  id          = "cluster-states"
  type        = "kubernetes"
  description = "Terraform state of the platform team's deployments"

  kubernetes {
    namespace = "outpost-state"
  }
}

# State in an S3 bucket (the deployments' service account needs access to it).
resource "outpost_state_storage" "s3" {
  id   = "s3-states"
  type = "s3"

  s3 {
    bucket      = "acme-terraform-states"
    region      = "eu-central-1"
    path_prefix = "outpost/"
  }
}
