# A state storage registered in another configuration, shared by several runners.
data "outpost_state_storage" "shared" {
  id = "cluster-states"
}

resource "outpost_key_pair" "staging" {
  kubernetes_secret {
    namespace = "outpost-system"
    name      = "outpost-staging-key"
  }
}

resource "outpost_kubernetes_agent_runner" "staging" {
  id               = "staging-cluster"
  public_keys      = [outpost_key_pair.staging.public_key_pem]
  state_storage_id = data.outpost_state_storage.shared.id

  job {
    namespace = "outpost-jobs"
  }
}
