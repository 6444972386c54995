#!/usr/bin/env bash
# Reports functions that no program of the repository can reach: golang.org/x/tools/cmd/deadcode
# (version in scripts/versions.env) follows the calls from every main package of the root and
# tools modules (the provider, the agent, the orchestrator; the demo, image, release and test-bed
# launchers, which reach into the root module's packages too), tests not counted, so code that only
# tests call is dead too. Test-support packages are left out: internal/testbed and packages named
# *test (orchestratortest) exist for tests.
#
# scripts/deadcode-known.txt lists findings known when this check was added; they are being
# removed. The check fails on any finding not listed there, and names listed ones that are gone so
# their lines can be deleted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The root module (go list -m names every module of the workspace, go.work).
module="$(GOWORK=off go list -m)"
deadcode="$(scripts/tools.sh --path deadcode)"
echo "deadcode: looking for unreachable functions (about 30 s of CPU)..."
# One line per dead function: "<package relative to the module> <func> <file:line:col>".
found="$("$deadcode" -f '{{range .Funcs}}{{$.Path}} {{.Name}} {{.Position}}{{"\n"}}{{end}}' ./... ./tools/... |
	sed "s|^$module/||; s|^$module |. |" |
	awk '$1 !~ /^internal\/testbed(\/|$)/ && $1 !~ /test$/')"
known="$(grep -v '^#' scripts/deadcode-known.txt | grep -v '^[[:space:]]*$' || true)"

new="$(awk 'NR == FNR { known[$1 " " $2] = 1; next } !(($1 " " $2) in known)' <(echo "$known") <(echo "$found") | sed '/^$/d')"
gone="$(awk 'NR == FNR { found[$1 " " $2] = 1; next } !(($1 " " $2) in found)' <(echo "$found") <(echo "$known") | sed '/^$/d')"

if [[ -n "$gone" ]]; then
	echo "deadcode: these entries of scripts/deadcode-known.txt are no longer dead (removed or used now); delete their lines:"
	echo "$gone" | sed 's/^/  /'
fi
if [[ -n "$new" ]]; then
	echo "deadcode: no program reaches these functions; delete them (or, if a test needs one, move it into the test):" >&2
	echo "$new" | awk '{ print "  " $3 ": " $1 " " $2 }' >&2
	exit 1
fi
echo "deadcode: no new dead code ($(echo "$known" | sed '/^$/d' | wc -l) known findings in scripts/deadcode-known.txt)"
