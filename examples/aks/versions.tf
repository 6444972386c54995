terraform {
  required_version = ">= 1.10"

  required_providers {
    outpost = {
      source = "outpost-dev/outpost"
    }
    azurerm = {
      source = "hashicorp/azurerm"
      # 4.65 added user_assigned_identity_id to azurerm_federated_identity_credential.
      version = "~> 4.65"
    }
  }
}
