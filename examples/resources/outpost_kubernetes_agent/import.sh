# An installed agent is imported by "<namespace>/<release_name>"; its settings are read back from
# the release's chart values (except `values`, which cannot be told apart from the rest).
terraform import outpost_kubernetes_agent.prod outpost-system/outpost-agent
