#!/usr/bin/env bash
# The hctl steps of Humanitec's kubernetes-agent runner setup, with the outpost command line: only
# the command changes (`hctl create runner` becomes `outpost runner create`). The files and the
# --set values are theirs, unchanged. TestHumanitecGuideCLI (cmd/outpost) runs this script.
set -euo pipefail

# Where the orchestrator is, and the admin token (or `outpost config set api_url|org|token`).
: "${OUTPOST_API_URL:?}" "${OUTPOST_ORG_ID:?}" "${OUTPOST_TOKEN:?}"

# 1. Humanitec's runner-config.yaml, as their documentation prints it. The state storage it
#    describes is created (or an existing one with the same settings reused).
outpost runner create my-runner -f runner-config.yaml

# 2. Their --set form from the CLI setup, with a key pair made by openssl.
export RUNNER_ID=kubernetes-agent-prod
export CLUSTER_RUNNER_JOB_NAMESPACE=humanitec-kubernetes-agent-runner-job-ns
export CLUSTER_RUNNER_JOB_SERVICEACCOUNT=humanitec-kubernetes-agent-runner-job
outpost runner create ${RUNNER_ID} \
  --set=runner_configuration="$(jq -nc --arg key "$(cat runner_public_key.pem)" '{"type": "kubernetes-agent","key":$key,"job":{"namespace":"'${CLUSTER_RUNNER_JOB_NAMESPACE}'","service_account":"'${CLUSTER_RUNNER_JOB_SERVICEACCOUNT}'"}}')" \
  --set=state_storage_configuration='{"type":"kubernetes","namespace":"'${CLUSTER_RUNNER_JOB_NAMESPACE}'"}'

# 3. Change a runner the same way: the file replaces the runner's settings.
outpost runner update my-runner -f runner-config.yaml --set description="moved from Humanitec"

# What is registered now, in Outpost's shape (`-o yaml` prints a file `update -f` takes).
outpost runner list
outpost state-storage list
outpost runner get my-runner -o yaml
