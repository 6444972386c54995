# Runner ids named after the cluster's kube context, the way many setup guides name them
# ("kubernetes-agent-<context>"). Neither context name is a valid id as it is: EKS contexts are
# ARNs, GKE contexts join project, location and cluster name with "_".
locals {
  eks_context = "arn:aws:eks:eu-west-1:123456789012:cluster/prod"
  gke_context = "gke_acme-platform_europe-west1_prod"
}

output "eks_runner_id" {
  # "kubernetes-agent-arn-aws-c0be03e0-1-123456789012-cluster-prod" (shortened to 63 characters)
  value = provider::outpost::runner_id("kubernetes-agent-${local.eks_context}")
}

output "gke_runner_id" {
  # "kubernetes-agent-gke-acme-platform-europe-west1-prod"
  value = provider::outpost::runner_id("kubernetes-agent-${local.gke_context}")
}
