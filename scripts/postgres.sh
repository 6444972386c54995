#!/usr/bin/env bash
# Installs PostgreSQL from Debian's packages when it is missing, for the tests that run the
# orchestrator on PostgreSQL (internal/pgtest starts a throwaway server from these binaries on a
# loopback port in a temporary directory), and prints the directory of its server binaries.
#
# Run as root it installs the package `postgresql` with apt-get (and says so). Without root, or
# off Debian, it only says what is missing; the PostgreSQL tests are then skipped (failed under
# CI=true).
#
# Usage: scripts/postgres.sh   install what is missing, print the bin directory
set -euo pipefail

bindir() {
	local d
	for d in /usr/lib/postgresql/*/bin; do
		[[ -x "$d/initdb" && -x "$d/postgres" ]] && echo "$d"
	done | sort -V | tail -n 1
}

dir="$(bindir)"
if [[ -z "$dir" ]]; then
	if ! command -v apt-get >/dev/null 2>&1 || [[ $(id -u) != 0 ]]; then
		echo "postgres: PostgreSQL's server binaries are missing; install them (Debian: sudo apt-get install postgresql)." \
			"The orchestrator's PostgreSQL tests will be skipped." >&2
		[[ "${CI:-}" == true ]] && exit 1
		exit 0
	fi
	echo "postgres: installing the Debian package postgresql with apt-get..." >&2
	start=$SECONDS
	# The package's own cluster is not used: the tests start their own.
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
	echo "postgres: installed in $((SECONDS - start))s" >&2
	dir="$(bindir)"
fi
echo "$dir"
