# A key pair kept in a Kubernetes Secret is imported by "<namespace>/<name>" of that Secret.
# Key pairs kept in state cannot be imported: the private key exists nowhere else.
terraform import outpost_key_pair.runner outpost-system/outpost-runner-key
