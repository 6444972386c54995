# The private key is written straight into a Secret of the agent's namespace and never enters
# Terraform state; only the public half and its fingerprint do.
resource "outpost_key_pair" "runner" {
  kubernetes_secret {
    namespace        = "outpost-system"
    name             = "outpost-runner-key"
    create_namespace = true
  }

  # Change a keeper to rotate the key in one apply: the Secret gets the new key, the runner's
  # public_keys (public_key_pem) the new public key, and the agent moves over without a restart.
  keepers = {
    generation = "1"
  }
}

# Without kubernetes_secret the private key is kept in state (private_key_pem, sensitive):
# protect the state like any other secret.
resource "outpost_key_pair" "in_state" {}
