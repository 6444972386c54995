# A runner is imported by its id.
terraform import outpost_kubernetes_agent_runner.prod prod-cluster
