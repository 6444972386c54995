# A runner registered elsewhere, e.g. to check that its agent is connected.
data "outpost_kubernetes_agent_runner" "prod" {
  id = "prod-cluster"
}

output "prod_runner_status" {
  value = data.outpost_kubernetes_agent_runner.prod.status
}
