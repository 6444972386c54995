#!/usr/bin/env bash
# Runs every Go fuzz target of the module (every `func FuzzX(f *testing.F)` in a _test.go file)
# for FUZZTIME each, one after the other, so a new target is fuzzed without being listed here.
# Each target's checked-in seeds (testdata/fuzz/FuzzX/) run first; new inputs the fuzzer finds
# stay in Go's cache. On a failure Go writes the input to testdata/fuzz/FuzzX/<hash> in the
# package: fix the bug, rename the file after what it shows, and commit it as a regression seed.
#
#   FUZZTIME=10s (default) · FUZZ_PARALLEL=2 workers · FUZZ_ONLY=<regexp> runs matching targets.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
parallel=${FUZZ_PARALLEL:-2}
only=${FUZZ_ONLY:-.}

mapfile -t targets < <(grep -rHo --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . |
	sed -E 's#^\./(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*#\1 \2#' | sort -u | grep -E "$only" || true)
if ((${#targets[@]} == 0)); then
	echo "fuzz: no fuzz target matches FUZZ_ONLY=$only" >&2
	exit 1
fi
echo "==> fuzzing ${#targets[@]} targets for $fuzztime each"
start=$(date +%s)
failed=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in "${targets[@]}"; do
	read -r dir fn <<<"$t"
	echo "--> $fn (./$dir)"
	rc=0
	go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$fuzztime" -parallel "$parallel" "./$dir" >"$log" 2>&1 || rc=$?
	# Of the progress lines (every 3 s) only the last, with the total of executions, is kept.
	grep -Ev '^fuzz: elapsed: ' "$log" || true
	grep -E '^fuzz: elapsed: [0-9]+s, execs: ' "$log" | tail -n 1 || true
	if ((rc != 0)); then
		failed+=("$fn (./$dir)")
	fi
done
echo "fuzz: ${#targets[@]} targets in $(($(date +%s) - start))s"
if ((${#failed[@]} > 0)); then
	printf 'fuzz: FAILED %s\n' "${failed[@]}" >&2
	exit 1
fi
