#!/usr/bin/env bash
# Installs Chromium (Debian package chromium) when it is missing, for the web console's browser
# tests (tools/browsertest), which drive it headless with chromedp
# against a real orchestrator on loopback.
#
# Run as root it installs the package with apt-get (and says so). Without root, or off Debian, it
# only says what is missing; those tests are then skipped (failed under CI=true).
#
# Usage: scripts/chromium.sh
set -euo pipefail

for exe in chromium chromium-browser google-chrome; do
	if command -v "$exe" >/dev/null 2>&1; then
		exit 0
	fi
done
# shellcheck source=debian-package.sh
source "$(dirname "$0")/debian-package.sh"
debian_package "chromium: Chromium" chromium "The web console's browser tests"
