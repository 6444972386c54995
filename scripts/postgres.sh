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

# shellcheck source=debian-package.sh
source "$(dirname "$0")/debian-package.sh"

dir="$(bindir)"
if [[ -z "$dir" ]]; then
	# The package's own cluster is not used: the tests start their own.
	debian_package "postgres: PostgreSQL's server binaries" postgresql "The orchestrator's PostgreSQL tests"
	dir="$(bindir)"
fi
echo "$dir"
