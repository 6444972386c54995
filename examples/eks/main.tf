# Outpost on an existing EKS cluster: the AWS identity of the deployment Jobs, and the runner.
#
# Two identities, kept apart on purpose:
#   * the agent (ServiceAccount outpost-agent in outpost-system) gets NO AWS role: it only talks
#     to the orchestrator and the Kubernetes API;
#   * the Jobs (ServiceAccount outpost-job in outpost-jobs) get the deployer role below, through
#     IRSA or EKS Pod Identity.

provider "aws" {
  region = var.region
}

# api_url, org_id and token come from OUTPOST_API_URL, OUTPOST_ORG_ID and OUTPOST_TOKEN. The
# cluster: its endpoint and CA from the EKS API, a short-lived token from the AWS CLI.
provider "outpost" {
  kubernetes {
    host                   = data.aws_eks_cluster.this.endpoint
    cluster_ca_certificate = base64decode(data.aws_eks_cluster.this.certificate_authority[0].data)

    exec {
      api_version = "client.authentication.k8s.io/v1beta1"
      command     = "aws"
      args        = ["eks", "get-token", "--cluster-name", var.cluster_name, "--region", var.region]
    }
  }
}

# Every name derived from the runner id, each within the limit of what it names (and the one
# check of the id itself).
module "names" {
  source = "../../modules/kubernetes-agent-runner/modules/names"

  runner_id = var.runner_id
}

data "aws_eks_cluster" "this" {
  name = var.cluster_name
}

locals {
  # The Jobs' Kubernetes identity (the installer module's defaults, spelled out so the AWS side
  # below and the module call cannot disagree).
  job_namespace       = "outpost-jobs"
  job_service_account = "outpost-job"
  job_subject         = "system:serviceaccount:outpost-jobs:outpost-job"

  irsa       = var.identity_mode == "irsa"
  s3_state   = var.state_storage == "s3"
  role_name  = coalesce(var.job_role_name, module.names.aws_role_name)
  bucket_arn = var.state_bucket == null ? null : "arn:aws:s3:::${var.state_bucket}"

  oidc_issuer          = data.aws_eks_cluster.this.identity[0].oidc[0].issuer
  oidc_issuer_hostpath = trimprefix(local.oidc_issuer, "https://")
  oidc_provider_arn    = var.oidc_provider_arn != null ? var.oidc_provider_arn : one(data.aws_iam_openid_connect_provider.cluster[*].arn)
}

# ---------------------------------------------------------------------------------------------
# The Jobs' role
# ---------------------------------------------------------------------------------------------

# IRSA: the cluster's IAM OIDC provider (it must exist; this stack does not create it).
data "aws_iam_openid_connect_provider" "cluster" {
  count = local.irsa && var.oidc_provider_arn == null ? 1 : 0
  url   = local.oidc_issuer
}

# IRSA trust: only tokens the cluster issued for outpost-jobs/outpost-job, meant for STS.
data "aws_iam_policy_document" "job_trust_irsa" {
  count = local.irsa ? 1 : 0

  statement {
    sid     = "OutpostJobsIRSA"
    effect  = "Allow"
    actions = ["sts:AssumeRoleWithWebIdentity"]

    principals {
      type        = "Federated"
      identifiers = [local.oidc_provider_arn]
    }

    condition {
      test     = "StringEquals"
      variable = "${local.oidc_issuer_hostpath}:sub"
      values   = [local.job_subject]
    }

    condition {
      test     = "StringEquals"
      variable = "${local.oidc_issuer_hostpath}:aud"
      values   = ["sts.amazonaws.com"]
    }
  }
}

# Pod Identity trust: the EKS Pod Identity service. Which pods may use the role is decided by
# aws_eks_pod_identity_association below (cluster + namespace + service account).
data "aws_iam_policy_document" "job_trust_pod_identity" {
  count = local.irsa ? 0 : 1

  statement {
    sid     = "OutpostJobsPodIdentity"
    effect  = "Allow"
    actions = ["sts:AssumeRole", "sts:TagSession"]

    principals {
      type        = "Service"
      identifiers = ["pods.eks.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "job" {
  name                 = local.role_name
  description          = "Deployer role of Outpost runner ${var.runner_id}: the identity Terraform runs with in its Jobs (${local.job_namespace}/${local.job_service_account})."
  assume_role_policy   = local.irsa ? data.aws_iam_policy_document.job_trust_irsa[0].json : data.aws_iam_policy_document.job_trust_pod_identity[0].json
  permissions_boundary = var.permissions_boundary_arn
  tags                 = var.tags
}

resource "aws_iam_role_policy_attachment" "job" {
  for_each = toset(var.job_policy_arns)

  role       = aws_iam_role.job.name
  policy_arn = each.value
}

# EKS Pod Identity: bind the role to the Jobs' service account.
resource "aws_eks_pod_identity_association" "job" {
  count = local.irsa ? 0 : 1

  cluster_name    = var.cluster_name
  namespace       = local.job_namespace
  service_account = local.job_service_account
  role_arn        = aws_iam_role.job.arn
  tags            = var.tags
}

# ---------------------------------------------------------------------------------------------
# State in S3 (optional): the Jobs' role gets the bucket, under the prefix only.
# ---------------------------------------------------------------------------------------------

data "aws_iam_policy_document" "job_state" {
  count = local.s3_state ? 1 : 0

  statement {
    sid       = "ListStatePrefix"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket_arn]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.state_path_prefix}*"]
    }
  }

  # The state objects and Terraform's S3 lock files (use_lockfile) next to them.
  statement {
    sid       = "ReadWriteStateObjects"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = ["${local.bucket_arn}/${var.state_path_prefix}*"]
  }
}

resource "aws_iam_role_policy" "job_state" {
  count = local.s3_state ? 1 : 0

  name   = "outpost-state"
  role   = aws_iam_role.job.id
  policy = data.aws_iam_policy_document.job_state[0].json
}

resource "outpost_state_storage" "s3" {
  count = local.s3_state ? 1 : 0

  id          = module.names.state_storage_id
  type        = "s3"
  description = "State of runner ${var.runner_id}, in S3 under ${var.state_path_prefix}"

  s3 {
    bucket      = var.state_bucket
    region      = coalesce(var.state_bucket_region, var.region)
    path_prefix = var.state_path_prefix
  }
}

# ---------------------------------------------------------------------------------------------
# The runner: key pair, state storage (kubernetes unless S3), registration, agent.
# ---------------------------------------------------------------------------------------------

module "runner" {
  source = "../../modules/kubernetes-agent-runner"

  runner_id   = module.names.runner_id
  description = "EKS cluster ${var.cluster_name} (${var.identity_mode})"

  job_namespace       = local.job_namespace
  job_service_account = local.job_service_account

  # IRSA reads the role from this annotation; Pod Identity needs none (the association is enough).
  job_service_account_annotations = local.irsa ? { "eks.amazonaws.com/role-arn" = aws_iam_role.job.arn } : {}

  state_storage_id = local.s3_state ? outpost_state_storage.s3[0].id : null
  serve_state      = !local.s3_state

  max_concurrency     = var.max_concurrency
  job_timeout         = var.job_timeout
  wait_for_connection = var.wait_for_connection

  # The first deployment must find its permissions in place.
  depends_on = [
    aws_iam_role_policy_attachment.job,
    aws_iam_role_policy.job_state,
    aws_eks_pod_identity_association.job,
  ]
}
