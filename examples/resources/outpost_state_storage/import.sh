# A state storage is imported by its id.
terraform import outpost_state_storage.cluster cluster-states
