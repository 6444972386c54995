#!/usr/bin/env bash
# Installs GnuPG (Debian package gnupg: gpg, gpg-agent, gpgconf) when it is missing, for the
# release test that signs the snapshot's SHA256SUMS with a throwaway key exactly as the release
# signs it (tools/release TestChecksumsSignatureDryRun).
#
# Run as root it installs the package with apt-get (and says so). Without root, or off Debian, it
# only says what is missing; that test is then skipped (failed under CI=true).
#
# Usage: scripts/gnupg.sh
set -euo pipefail

if command -v gpg >/dev/null 2>&1 && command -v gpg-agent >/dev/null 2>&1 && command -v gpg-connect-agent >/dev/null 2>&1; then
	exit 0
fi
# shellcheck source=debian-package.sh
source "$(dirname "$0")/debian-package.sh"
debian_package "gnupg: GnuPG" gnupg "The dry run of the release's GPG signature"
