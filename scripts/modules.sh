#!/usr/bin/env bash
# Checks the repository's Go modules (ARCHITECTURE.md, "Modules"): the product at the root, the
# tools in tools/ and the real-pod end-to-end tests in agent/e2e/pods, joined by go.work.
#
#   - Each module is tidy and builds on its own (GOWORK=off). In the workspace, a root package
#     that imports something only the tools require still compiles; on its own it does not, and
#     `go mod tidy` would add the tool's dependency to the product's go.mod.
#   - The workspace builds the root module's packages, tests included, from exactly the module
#     versions the root go.mod selects, so the tests build what the release ships (which builds
#     with GOWORK=off): a tool's dependency that raises a version the product links fails here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mapfile -t modules < <(go work edit -json | sed -n 's/^[[:space:]]*"DiskPath": "\(.*\)"$/\1/p')
failed=0
for m in "${modules[@]}"; do
	if ! (cd "$m" && GOWORK=off go mod tidy -diff >/dev/null); then
		echo "modules: $m/go.mod or go.sum is not tidy: run (cd $m && go mod tidy) and commit the result" >&2
		failed=1
	fi
	if ! out="$(cd "$m" && GOWORK=off go vet ./... 2>&1)"; then
		echo "$out" >&2
		echo "modules: $m does not build on its own (GOWORK=off): it imports a package its go.mod does not require; a tool's dependency belongs in tools/ (ARCHITECTURE.md, \"Modules\")" >&2
		failed=1
	fi
done

# The modules (path@version, and what replaces it) the root module's packages and tests compile.
linked() {
	go list -deps -test -f '{{with .Module}}{{.Path}}@{{.Version}}{{with .Replace}} => {{.Path}}@{{.Version}}{{end}}{{end}}' ./... | sort -u
}
if ! alone="$(GOWORK=off linked 2>/dev/null)"; then
	failed=1 # the root module does not build on its own: said above
elif ! skew="$(diff <(echo "$alone") <(linked))"; then
	echo "$skew" >&2
	echo "modules: the workspace builds the product with other versions than its go.mod selects (< root alone, > workspace): raise the version in the root go.mod, or lower it (or drop the replace) in the module that raised it" >&2
	failed=1
fi
((failed == 0)) || exit 1
echo "modules: ${modules[*]} tidy, each builds on its own, the product builds from its own go.mod's versions"
