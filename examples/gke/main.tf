# Outpost on an existing GKE cluster: the Google identity of the deployment Jobs, and the runner.
#
# Two identities, kept apart on purpose:
#   * the agent (Kubernetes ServiceAccount outpost-agent in outpost-system) gets NO Google
#     identity: it only talks to the orchestrator and the Kubernetes API;
#   * the Jobs (ServiceAccount outpost-job in outpost-jobs) impersonate the Google service
#     account below through GKE Workload Identity.

provider "google" {
  project = var.project_id
}

# api_url, org_id and token come from OUTPOST_API_URL, OUTPOST_ORG_ID and OUTPOST_TOKEN. The
# cluster: endpoint and CA from the GKE API, the access token of the credentials running Terraform.
provider "outpost" {
  kubernetes {
    host                   = "https://${data.google_container_cluster.this.endpoint}"
    cluster_ca_certificate = base64decode(data.google_container_cluster.this.master_auth[0].cluster_ca_certificate)
    token                  = data.google_client_config.current.access_token
  }
}

# Every name derived from the runner id, each within the limit of what it names (and the one
# check of the id itself).
module "names" {
  source = "../../modules/kubernetes-agent-runner/modules/names"

  runner_id = var.runner_id
}

data "google_client_config" "current" {}

data "google_container_cluster" "this" {
  project  = local.cluster_project_id
  name     = var.cluster_name
  location = var.cluster_location
}

locals {
  # The Jobs' Kubernetes identity (the installer module's defaults, spelled out so the Google
  # side below and the module call cannot disagree).
  job_namespace       = "outpost-jobs"
  job_service_account = "outpost-job"
  job_subject         = "system:serviceaccount:outpost-jobs:outpost-job"

  cluster_project_id = coalesce(var.cluster_project_id, var.project_id)
  # <cluster project>.svc.id.goog when Workload Identity is on; null when it is off.
  workload_pool = one(data.google_container_cluster.this.workload_identity_config[*].workload_pool)
}

# ---------------------------------------------------------------------------------------------
# The Jobs' Google service account and what it may do
# ---------------------------------------------------------------------------------------------

resource "google_service_account" "job" {
  project      = var.project_id
  account_id   = coalesce(var.job_service_account_id, module.names.gcp_service_account_id)
  display_name = "Outpost deployer (${var.runner_id})"
  description  = "Identity Terraform runs with in the Jobs of Outpost runner ${var.runner_id} (${local.job_namespace}/${local.job_service_account} on ${var.cluster_name})."
}

resource "google_project_iam_member" "job" {
  for_each = toset(var.job_project_roles)

  project = var.project_id
  role    = each.value
  member  = "serviceAccount:${google_service_account.job.email}"
}

# Workload Identity: the Kubernetes service account outpost-jobs/outpost-job may act as the
# Google service account (and no other Kubernetes service account may).
resource "google_service_account_iam_member" "job_workload_identity" {
  service_account_id = google_service_account.job.name
  role               = "roles/iam.workloadIdentityUser"
  member             = "serviceAccount:${local.workload_pool}[${local.job_namespace}/${local.job_service_account}]"

  lifecycle {
    precondition {
      condition     = local.workload_pool == "${local.cluster_project_id}.svc.id.goog"
      error_message = "Cluster ${var.cluster_name} does not have Workload Identity enabled (workload_identity_config.workload_pool should be ${local.cluster_project_id}.svc.id.goog). Enable it, and the GKE metadata server on its node pools."
    }
  }
}

# ---------------------------------------------------------------------------------------------
# The runner: key pair, kubernetes state storage, registration, agent.
# ---------------------------------------------------------------------------------------------

module "runner" {
  source = "../../modules/kubernetes-agent-runner"

  runner_id   = module.names.runner_id
  description = "GKE cluster ${var.cluster_name} (${var.cluster_location})"

  job_namespace       = local.job_namespace
  job_service_account = local.job_service_account

  job_service_account_annotations = {
    "iam.gke.io/gcp-service-account" = google_service_account.job.email
  }

  max_concurrency     = var.max_concurrency
  job_timeout         = var.job_timeout
  wait_for_connection = var.wait_for_connection

  # The first deployment must find its permissions in place.
  depends_on = [
    google_project_iam_member.job,
    google_service_account_iam_member.job_workload_identity,
  ]
}
