# Humanitec's kubernetes-agent-orchestrator-runner module, on Outpost: the same inputs and
# outputs, composed from modules/kubernetes-agent-runner. Only what has no Outpost counterpart is
# ignored, with a warning (the chart's repository and version, Humanitec's runner image,
# REMOTE_URL).

locals {
  env = { for e in var.extra_env_vars : upper(e.name) => e.value }

  # The proxy variables become the agent's proxy, which it hands to the job pods as well.
  https_proxy = lookup(local.env, "HTTPS_PROXY", null)
  http_proxy  = lookup(local.env, "HTTP_PROXY", null)
  no_proxy    = [for h in split(",", lookup(local.env, "NO_PROXY", "")) : trimspace(h) if trimspace(h) != ""]
  has_proxy   = local.https_proxy != null || local.http_proxy != null
  proxy = local.has_proxy ? {
    https    = local.https_proxy
    http     = local.http_proxy
    no_proxy = length(local.no_proxy) > 0 ? local.no_proxy : null
  } : null
  taken     = concat(["REMOTE_URL"], local.has_proxy ? ["HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"] : [])
  agent_env = [for e in var.extra_env_vars : { name = e.name, value = e.value } if !contains(local.taken, upper(e.name))]

  pod_template_json = var.pod_template == null ? "" : (can(tostring(var.pod_template)) ? tostring(var.pod_template) : jsonencode(var.pod_template))
}

module "runner" {
  source = "../kubernetes-agent-runner"

  runner_id                         = var.runner_id
  org_id                            = try(coalesce(var.orchestrator_org_id, var.humanitec_org_id), null)
  private_key_file                  = var.private_key_path
  agent_namespace                   = var.k8s_namespace
  agent_service_account_name        = var.k8s_service_account_name
  agent_service_account_annotations = var.service_account_annotations
  job_namespace                     = var.k8s_job_namespace
  job_service_account               = var.k8s_job_service_account_name
  job_service_account_annotations   = var.service_account_annotations
  state_namespace                   = coalesce(var.state_namespace, var.k8s_job_namespace)
  pod_template                      = var.pod_template
  proxy                             = local.proxy
  agent_extra_env                   = length(local.agent_env) > 0 ? local.agent_env : null
  agent_image                       = var.agent_image
  job_image                         = var.job_image
  wait_for_connection               = var.wait_for_connection
}

check "chart_repository_and_version" {
  assert {
    condition     = var.kubernetes_agent_runner_chart_repository == null && var.kubernetes_agent_runner_chart_version == null
    error_message = "kubernetes_agent_runner_chart_repository and kubernetes_agent_runner_chart_version are ignored: the outpost provider embeds the agent chart of its own version (${module.runner.agent_chart_version}), so there is no chart repository to reach or mirror. Pin the provider's version, and remove these inputs."
  }
}

check "runner_image" {
  assert {
    condition     = var.kubernetes_agent_runner_image_repository == null && var.kubernetes_agent_runner_image_tag == null
    error_message = "kubernetes_agent_runner_image_repository and kubernetes_agent_runner_image_tag name Humanitec's runner image; Outpost's chart runs its own agent, so they are ignored. For a mirror, copy ghcr.io/outpost-dev/outpost-agent and ghcr.io/outpost-dev/outpost-job and set agent_image and job_image, then remove these inputs."
  }
}

check "pod_template_image" {
  assert {
    condition     = var.kubernetes_agent_runner_image_repository == null || !strcontains(local.pod_template_json, var.kubernetes_agent_runner_image_repository)
    error_message = "pod_template sets Humanitec's runner image (${coalesce(var.kubernetes_agent_runner_image_repository, "-")}) on a container: Outpost runs Terraform/OpenTofu in the image of the container named main, with its job runner copied in, so that image must have terraform or tofu. Remove the image from pod_template to use Outpost's job image (job_image), or give an image with terraform or tofu."
  }
}

check "remote_url" {
  assert {
    condition     = !contains(keys(local.env), "REMOTE_URL")
    error_message = "REMOTE_URL in extra_env_vars is ignored: it pointed Humanitec's runner at its orchestrator; the Outpost agent talks to the outpost provider's api_url (OUTPOST_API_URL). Remove it."
  }
}
