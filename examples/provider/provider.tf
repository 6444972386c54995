terraform {
  required_providers {
    outpost = {
      source = "outpost-dev/outpost"
    }
  }
}

# api_url, org_id and token fall back to OUTPOST_API_URL, OUTPOST_ORG_ID and OUTPOST_TOKEN.
# Keep the admin token in the environment rather than in the configuration.
provider "outpost" {
  api_url = "https://outpost.example.com"
  org_id  = "my-org"

  # The cluster the agent is installed into and the runner's key Secret is written to. Only
  # outpost_kubernetes_agent and outpost_key_pair with kubernetes_secret connect to it.
  # Without this block the provider reads KUBE_CONFIG_PATH, or the in-cluster configuration.
  kubernetes {
    config_path    = "~/.kube/config"
    config_context = "prod"
  }
}
