# A Humanitec kubernetes-agent runner moved to Outpost, keeping what the cluster already has: the
# key pair made with openssl (the private key stays in its Secret), the namespaces and service
# accounts, the runner id derived from the kube context, and the labels-only pod template. The
# guide "Migrating from the Humanitec kubernetes-agent runner" explains every line.

terraform {
  required_version = ">= 1.10"

  required_providers {
    outpost = {
      source = "outpost-dev/outpost"
    }
  }
}

locals {
  kubeconfig_context = "gke_acme-platform_europe-west1_prod"
  org_id             = "acme"

  # A kube context name is rarely a valid runner id; the function makes one, the same every run.
  runner_id = provider::outpost::runner_id("kubernetes-agent-${local.kubeconfig_context}")

  # Where the Humanitec runner ran, kept: the key Secret stays where it is, and the cloud
  # identities bound to these service account names (IRSA trust, Workload Identity) still apply.
  agent_namespace       = "humanitec-kubernetes-agent-runner-ns"
  agent_service_account = "humanitec-kubernetes-agent-runner"
  job_namespace         = "humanitec-kubernetes-agent-runner-job-ns"
  job_service_account   = "humanitec-kubernetes-agent-runner-job"
}

# One provider instead of platform-orchestrator, kubernetes and helm: it registers the runner and
# installs the agent from the chart it embeds (no chart repository to reach or mirror).
provider "outpost" {
  org_id = local.org_id
  # api_url from OUTPOST_API_URL; the admin token from OUTPOST_TOKEN, never in a file.

  kubernetes {
    config_path    = "~/.kube/config"
    config_context = local.kubeconfig_context
  }
}

module "kubernetes_agent_runner" {
  source = "github.com/outpost-dev/terraform-provider-outpost//modules/kubernetes-agent-runner"

  org_id    = local.org_id
  runner_id = local.runner_id

  # Bring your own key: the public half is registered; the agent reads the private half from the
  # Secret the Humanitec setup created. No key is generated and none enters the Terraform state.
  public_key = file("${path.module}/runner_public_key.pem")
  private_key_secret = {
    name = "humanitec-kubernetes-agent-runner"
    key  = "private_key"
  }

  agent_namespace            = local.agent_namespace
  agent_service_account_name = local.agent_service_account
  job_namespace              = local.job_namespace
  job_service_account        = local.job_service_account
  # The runner's states, served by the agent from Secrets of this namespace.
  state_namespace = local.job_namespace

  # The cloud identity of the deployments: on the Jobs' service account only, not the agent's.
  job_service_account_annotations = {
    "iam.gke.io/gcp-service-account" = "deployer@acme-platform.iam.gserviceaccount.com"
  }

  # The pod template as before: jsonencode() of a template that sets only labels. The runner adds
  # the container named "main" that runs Terraform/OpenTofu.
  pod_template = jsonencode({
    metadata = {
      labels = {
        "app.kubernetes.io/name" = "kubernetes-agent-runner"
      }
    }
  })
}

output "runner_id" {
  description = "Id of the registered runner."
  value       = module.kubernetes_agent_runner.runner_id
}
