# Outpost on an existing AKS cluster: the Azure identity of the deployment Jobs, and the runner.
#
# Two identities, kept apart on purpose:
#   * the agent (ServiceAccount outpost-agent in outpost-system) gets NO Azure identity: it only
#     talks to the orchestrator and the Kubernetes API;
#   * the Jobs (ServiceAccount outpost-job in outpost-jobs) get the managed identity below through
#     Microsoft Entra Workload ID (federated credential + service-account annotation + pod label).

provider "azurerm" {
  features {}
  subscription_id = var.subscription_id
}

# api_url, org_id and token come from OUTPOST_API_URL, OUTPOST_ORG_ID and OUTPOST_TOKEN. The
# cluster: endpoint and CA from the AKS API, an Entra ID token from kubelogin. This works on
# clusters with Entra ID integration and local accounts disabled (the recommended setup); no
# static cluster credential enters the Terraform state through this provider.
provider "outpost" {
  kubernetes {
    host                   = data.azurerm_kubernetes_cluster.this.kube_config[0].host
    cluster_ca_certificate = base64decode(data.azurerm_kubernetes_cluster.this.kube_config[0].cluster_ca_certificate)

    exec {
      api_version = "client.authentication.k8s.io/v1beta1"
      command     = "kubelogin"
      # 6dae42f8-... is the fixed application id of the AKS Entra ID server (the token's audience).
      args = ["get-token", "--login", var.kubelogin_login_mode, "--server-id", "6dae42f8-4368-4678-94ff-3960e28e3630"]
    }
  }
}

# Every name derived from the runner id, each within the limit of what it names (and the one
# check of the id itself).
module "names" {
  source = "../../modules/kubernetes-agent-runner/modules/names"

  runner_id = var.runner_id
}

data "azurerm_kubernetes_cluster" "this" {
  name                = var.cluster_name
  resource_group_name = var.resource_group_name
}

locals {
  # The Jobs' Kubernetes identity (the installer module's defaults, spelled out so the Azure side
  # below and the module call cannot disagree).
  job_namespace       = "outpost-jobs"
  job_service_account = "outpost-job"
  job_subject         = "system:serviceaccount:outpost-jobs:outpost-job"

  identity_resource_group_name = coalesce(var.identity_resource_group_name, var.resource_group_name)
  oidc_issuer_url              = data.azurerm_kubernetes_cluster.this.oidc_issuer_url
}

# ---------------------------------------------------------------------------------------------
# The Jobs' managed identity and what it may do
# ---------------------------------------------------------------------------------------------

resource "azurerm_user_assigned_identity" "job" {
  name                = coalesce(var.job_identity_name, module.names.azure_identity_name)
  resource_group_name = local.identity_resource_group_name
  location            = data.azurerm_kubernetes_cluster.this.location
  tags                = var.tags
}

# Workload identity federation: tokens the cluster's OIDC issuer signs for outpost-jobs/outpost-job
# (and for no other service account) may be exchanged for the managed identity's tokens.
resource "azurerm_federated_identity_credential" "job" {
  name                      = module.names.azure_federated_credential_name
  user_assigned_identity_id = azurerm_user_assigned_identity.job.id
  audience                  = ["api://AzureADTokenExchange"]
  issuer                    = local.oidc_issuer_url
  subject                   = local.job_subject

  lifecycle {
    precondition {
      condition     = local.oidc_issuer_url != null && local.oidc_issuer_url != ""
      error_message = "Cluster ${var.cluster_name} has no OIDC issuer. Enable it and Workload Identity: az aks update -g ${var.resource_group_name} -n ${var.cluster_name} --enable-oidc-issuer --enable-workload-identity."
    }
  }
}

resource "azurerm_role_assignment" "job" {
  for_each = { for a in var.job_role_assignments : "${a.role_definition_name} on ${a.scope}" => a }

  scope                = each.value.scope
  role_definition_name = each.value.role_definition_name
  principal_id         = azurerm_user_assigned_identity.job.principal_id
  principal_type       = "ServicePrincipal"
  description          = "Outpost runner ${var.runner_id}: deployments of ${local.job_namespace}/${local.job_service_account}"
}

# ---------------------------------------------------------------------------------------------
# The runner: key pair, kubernetes state storage, registration, agent.
# ---------------------------------------------------------------------------------------------

module "runner" {
  source = "../../modules/kubernetes-agent-runner"

  runner_id   = module.names.runner_id
  description = "AKS cluster ${var.cluster_name} (${var.resource_group_name})"

  job_namespace       = local.job_namespace
  job_service_account = local.job_service_account

  # The Workload Identity webhook injects the token and AZURE_* variables into pods that carry
  # the label, for the identity named on their service account.
  job_service_account_annotations = {
    "azure.workload.identity/client-id" = azurerm_user_assigned_identity.job.client_id
    "azure.workload.identity/tenant-id" = azurerm_user_assigned_identity.job.tenant_id
  }
  job_pod_labels = {
    "azure.workload.identity/use" = "true"
  }

  max_concurrency     = var.max_concurrency
  job_timeout         = var.job_timeout
  wait_for_connection = var.wait_for_connection

  # The first deployment must find its permissions in place.
  depends_on = [
    azurerm_federated_identity_credential.job,
    azurerm_role_assignment.job,
  ]
}
