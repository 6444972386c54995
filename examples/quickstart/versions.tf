terraform {
  required_version = ">= 1.10"

  required_providers {
    outpost = {
      source = "outpost-dev/outpost"
    }
  }
}

# api_url, org_id and token come from OUTPOST_API_URL, OUTPOST_ORG_ID and OUTPOST_TOKEN; the
# cluster from KUBE_CONFIG_PATH. `make demo` sets all four for the local test bed.
provider "outpost" {}
