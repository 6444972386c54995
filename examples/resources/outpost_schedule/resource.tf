# Check every night at 03:00 UTC whether the web stack's infrastructure still matches its
# configuration and state. A check that finds changes marks the state key drifted
# (`outpost state list`, `outpost schedule get web-nightly`, the metric
# outpost_orchestrator_drifted_states); the next check without changes clears the mark.
resource "outpost_schedule" "web_nightly" {
  id        = "web-nightly"
  runner_id = "cluster"
  state_key = "apps/web"
  cron      = "0 3 * * *"

  git {
    url  = "https://github.com/acme/infra.git"
    ref  = "main"
    path = "stacks/web"
  }

  variables = {
    environment = "production"
  }
}

# A configuration from a local directory goes in packed instead of git:
#   inline_archive_base64 = filebase64("${path.module}/web.tar.gz")
# (a gzip-compressed tar built beforehand: tar czf web.tar.gz -C stacks/web .)
