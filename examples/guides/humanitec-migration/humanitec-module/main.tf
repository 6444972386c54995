# Humanitec's documented installer-module call (generic Kubernetes setup, with the EKS service
# account annotation and every self-hosting input), moved to Outpost by changing `source` alone.
# The locals are theirs; one outpost provider replaces platform-orchestrator, kubernetes and helm.
# TestInstallerModule (tools/demo) applies this file as written, with Terraform and OpenTofu.

terraform {
  required_version = ">= 1.10"

  required_providers {
    outpost = {
      source = "outpost-dev/outpost"
    }
  }
}

locals {
  kubeconfig_context = "prod-eu"
  humanitec_org      = "acme"
  runner_id          = "kubernetes-agent-${local.kubeconfig_context}"

  cluster_runner_namespace          = "humanitec-kubernetes-agent-runner-ns"
  cluster_runner_serviceaccount     = "humanitec-kubernetes-agent-runner"
  cluster_runner_job_namespace      = "humanitec-kubernetes-agent-runner-job-ns"
  cluster_runner_job_serviceaccount = "humanitec-kubernetes-agent-runner-job"

  # Self-hosting values of Humanitec's setup: accepted, and the ones without an Outpost meaning
  # are ignored with a warning (see the guide).
  kubernetes_agent_runner_chart_repository = "oci://myregistry.example.com/charts"
  kubernetes_agent_runner_chart_version    = "X.Y.Z"
  kubernetes_agent_runner_image_repository = "myregistry.example.com/humanitec/humanitec-runner"
  kubernetes_agent_runner_image_tag        = "vX.Y.Z"
  orchestrator_api_url                     = "https://my-orchestrator-api.example.com"
}

# The orchestrator's URL and token from OUTPOST_API_URL and OUTPOST_TOKEN; the cluster from the
# kubeconfig context.
provider "outpost" {
  org_id = local.humanitec_org

  kubernetes {
    config_path    = "~/.kube/config"
    config_context = local.kubeconfig_context
  }
}

module "kubernetes_agent_runner" {
  source = "github.com/outpost-dev/terraform-provider-outpost//modules/kubernetes-agent-orchestrator-runner"

  humanitec_org_id             = local.humanitec_org
  runner_id                    = local.runner_id
  private_key_path             = "./runner_private_key.pem"
  public_key_path              = "./runner_public_key.pem"
  k8s_namespace                = local.cluster_runner_namespace
  k8s_service_account_name     = local.cluster_runner_serviceaccount
  k8s_job_namespace            = local.cluster_runner_job_namespace
  k8s_job_service_account_name = local.cluster_runner_job_serviceaccount

  service_account_annotations = {
    "eks.amazonaws.com/role-arn" = "arn:aws:iam::123456789012:role/humanitec-runner"
  }

  kubernetes_agent_runner_chart_repository = local.kubernetes_agent_runner_chart_repository
  kubernetes_agent_runner_chart_version    = local.kubernetes_agent_runner_chart_version
  extra_env_vars = [
    {
      name  = "REMOTE_URL"
      value = local.orchestrator_api_url
    }
  ]
  kubernetes_agent_runner_image_repository = local.kubernetes_agent_runner_image_repository
  kubernetes_agent_runner_image_tag        = local.kubernetes_agent_runner_image_tag
  pod_template = jsonencode({
    metadata = {
      labels = {
        "app.kubernetes.io/name"    = "humanitec-runner"
        "app.kubernetes.io/version" = local.kubernetes_agent_runner_image_tag
      }
    }
    spec = {
      containers = [
        {
          name            = "main"
          image           = "${local.kubernetes_agent_runner_image_repository}:${local.kubernetes_agent_runner_image_tag}"
          imagePullPolicy = "IfNotPresent"
        }
      ]
      imagePullSecrets = [
        {
          name = "regcred"
        }
      ]
    }
  })
}

output "runner_id" {
  value = module.kubernetes_agent_runner.runner_id
}

output "k8s_namespace" {
  value = module.kubernetes_agent_runner.k8s_namespace
}

output "k8s_job_namespace" {
  value = module.kubernetes_agent_runner.k8s_job_namespace
}

output "k8s_service_account" {
  value = module.kubernetes_agent_runner.k8s_service_account
}

output "k8s_job_service_account_name" {
  value = module.kubernetes_agent_runner.k8s_job_service_account_name
}

output "runner_helm_chart_version" {
  value = module.kubernetes_agent_runner.runner_helm_chart_version
}
