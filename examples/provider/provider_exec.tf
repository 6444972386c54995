# On EKS, authenticate to the cluster with a short-lived token from the AWS CLI. (The alias only
# keeps this example apart from the one in provider.tf.)
provider "outpost" {
  alias = "eks"

  kubernetes {
    host                   = "https://ABCDEF0123456789.gr7.eu-central-1.eks.amazonaws.com"
    cluster_ca_certificate = file("${path.module}/cluster-ca.pem")

    exec {
      api_version = "client.authentication.k8s.io/v1beta1"
      command     = "aws"
      args        = ["eks", "get-token", "--cluster-name", "prod"]
    }
  }
}
