# Every name derived from a runner id, in one place, so that each always fits the limit of
# whatever it names. A name is "<prefix><runner_id><suffix>" when that fits; otherwise the runner
# id is cut to fit and the first 8 hex digits of its SHA-256 go between the cut id and the suffix,
# so two runner ids that share a long beginning still get different names. Only built-in
# functions: the tests evaluate these expressions with the real CLI for boundary runner ids.
locals {
  hash = substr(sha256(var.runner_id), 0, 8)

  # name => [prefix, suffix, the limit of what it names]
  shapes = {
    # Outpost ids are DNS-1123 labels: at most 63 characters.
    state_storage_id = ["", "-states", 63]
    # AWS IAM role names: at most 64 characters.
    aws_role_name = ["outpost-", "-job", 64]
    # Google service account ids (account_id): 6 to 30 characters, a letter first, a letter or
    # digit last.
    gcp_service_account_id = ["outpost-", "-job", 30]
    # Azure user-assigned identity names: 3 to 128 characters.
    azure_identity_name = ["outpost-", "-job", 128]
    # Azure federated identity credential names: 3 to 120 characters.
    azure_federated_credential_name = ["outpost-", "-jobs", 120]
  }

  names = {
    for name, s in local.shapes : name => (
      length("${s[0]}${var.runner_id}${s[1]}") <= s[2]
      ? "${s[0]}${var.runner_id}${s[1]}"
      : "${s[0]}${substr(var.runner_id, 0, s[2] - length(s[0]) - length(s[1]) - 9)}-${local.hash}${s[1]}"
    )
  }
}
