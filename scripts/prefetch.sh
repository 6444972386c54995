#!/usr/bin/env bash
# Downloads into the Go module cache every module a cold `.ci/run` goes on to build: the
# product's, the test bed's (Kubernetes, etcd, CoreDNS, the registry, kwok) and the tools' (OpenTofu, helm,
# golangci-lint, goreleaser, tfplugindocs, deadcode, actionlint, cosign). .ci/run starts it in the background first,
# so the downloads overlap the CPU-bound builds of the first steps instead of each build waiting
# for its own; on a warm machine it finds everything present in a few seconds.
#
# It never fails the run: a module it cannot fetch is fetched again, and reported, by the step
# that needs it. Running beside builds is safe (the module cache locks what it writes).
#
# Usage: scripts/prefetch.sh
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=versions.env
source scripts/versions.env

start=$SECONDS
failed=()
tmp="$(mktemp -d)"
trap 'rm -rf -- "$tmp"' EXIT

# in_module DIR: the modules DIR's packages and tests need.
in_module() {
	(cd "$1" && GOWORK=off GOFLAGS=-mod=readonly go mod download) || failed+=("$1")
}

# tool MODULE@VERSION: the module, then the modules its own go.mod needs (what `go install
# MODULE/cmd@VERSION` resolves), from outside any main module.
tool() {
	local dir
	dir="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	if [[ -z "$dir" ]]; then
		failed+=("$1")
		return
	fi
	in_module "$dir"
}

# In the order the steps of .ci/run need them.
tool "github.com/hashicorp/terraform-plugin-docs@$TFPLUGINDOCS_VERSION"
in_module .
in_module tools
in_module agent/e2e/pods
in_module internal/testbed/components
in_module internal/testbed/coredns
in_module internal/testbed/registry
in_module internal/testbed/netpol
tool "sigs.k8s.io/kwok@$KWOK_VERSION"
tool "github.com/opentofu/opentofu@$TOFU_VERSION"
tool "helm.sh/helm/v3@$HELM_VERSION"
tool "github.com/golangci/golangci-lint/v2@$GOLANGCI_VERSION"
tool "golang.org/x/tools@$XTOOLS_VERSION"
tool "github.com/rhysd/actionlint@$ACTIONLINT_VERSION"
tool "github.com/goreleaser/goreleaser/v2@$GORELEASER_VERSION"
tool "github.com/sigstore/cosign/v3@$COSIGN_VERSION"
# The drift test's hashicorp/local, built from its module (agent/e2e/drift_test.go, localProviderVersion).
tool "github.com/hashicorp/terraform-provider-local@v1.4.0"

if ((${#failed[@]} > 0)); then
	echo "prefetch: could not download the modules of ${failed[*]}; the steps that need them will try again" >&2
fi
echo "prefetch: modules downloaded in $((SECONDS - start))s"
