# The small deployment `make demo` submits to the runner. It uses only Terraform's built-in
# terraform_data resource, so it runs without downloading providers; a real deployment would
# use any provider the job image can reach.
variable "greeting" {
  type        = string
  description = "Text the deployment echoes back as an output."
  default     = "hello"
}

resource "terraform_data" "greeting" {
  input = var.greeting
}

resource "terraform_data" "servers" {
  count = 3
  input = {
    name = format("server-%02d", count.index + 1)
    size = count.index == 0 ? "large" : "small"
  }
}

output "greeting" {
  description = "The greeting, read back from the applied resource."
  value       = terraform_data.greeting.output
}

output "servers" {
  description = "Names of the servers the deployment manages."
  value       = [for s in terraform_data.servers : s.output.name]
}

output "api_token" {
  description = "A sensitive output: the orchestrator stores it marked sensitive."
  value       = sha256(var.greeting)
  sensitive   = true
}
