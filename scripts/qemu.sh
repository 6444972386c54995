#!/usr/bin/env bash
# Installs qemu-user (Debian package qemu-user-static) when it is missing, for the test that runs
# the arm64 images' binaries under emulation (internal/image/recipe
# TestArm64ImagesRunUnderEmulation); without it the build still checks every arm64 file's
# architecture and libraries, but nothing arm64 runs.
#
# Run as root it installs the package with apt-get (and says so). Without root, or off Debian, it
# only says what is missing; that test is then skipped (failed under CI=true).
#
# Usage: scripts/qemu.sh
set -euo pipefail

if command -v qemu-aarch64-static >/dev/null 2>&1 || command -v qemu-aarch64 >/dev/null 2>&1; then
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || [[ $(id -u) != 0 ]]; then
	echo "qemu: qemu-user is missing; install it (Debian: sudo apt-get install qemu-user-static)." \
		"The test that runs the arm64 images under emulation will be skipped." >&2
	[[ "${CI:-}" == true ]] && exit 1
	exit 0
fi
echo "qemu: installing the Debian package qemu-user-static with apt-get..." >&2
start=$SECONDS
DEBIAN_FRONTEND=noninteractive apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user-static >/dev/null
echo "qemu: installed in $((SECONDS - start))s" >&2
