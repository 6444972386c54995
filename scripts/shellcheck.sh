#!/usr/bin/env bash
# Installs shellcheck (Debian package shellcheck) when it is missing and prints its path, for
# `make actionlint`, which hands it to actionlint to check the shell of the workflows' `run:`
# steps. Prints nothing when it cannot be had: actionlint then checks everything but that shell.
#
# Run as root it installs the package with apt-get (and says so). Without root, or off Debian, it
# only says what is missing (and fails under CI=true).
#
# Usage: scripts/shellcheck.sh
set -euo pipefail

if ! command -v shellcheck >/dev/null 2>&1; then
	# shellcheck source=debian-package.sh
	source "$(dirname "$0")/debian-package.sh"
	debian_package "shellcheck" shellcheck "actionlint's check of the workflows' shell steps" >&2
fi
command -v shellcheck || true
