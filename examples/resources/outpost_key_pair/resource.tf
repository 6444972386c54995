# The private key is written straight into a Secret of the agent's namespace and never enters
# Terraform state; only the public half and its fingerprint do.
resource "outpost_key_pair" "runner" {
  kubernetes_secret {
    namespace        = "outpost-system"
    name             = "outpost-runner-key"
    create_namespace = true
  }

  # Change a keeper to generate a new key (rotation). Add the new key to the runner's
  # public_keys next to the old one, roll the agent onto it, then drop the old key.
  keepers = {
    generation = "1"
  }
}

# Without kubernetes_secret the private key is kept in state (private_key_pem, sensitive):
# protect the state like any other secret.
resource "outpost_key_pair" "in_state" {}
