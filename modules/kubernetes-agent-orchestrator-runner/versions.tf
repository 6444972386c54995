terraform {
  required_version = ">= 1.10"

  required_providers {
    outpost = {
      source = "outpost-dev/outpost"
    }
  }
}
