#!/usr/bin/env bash
# Installs qemu-user (Debian package qemu-user-static) when it is missing, for the test that runs
# the arm64 images' binaries under emulation (tools/image/recipe
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
# shellcheck source=debian-package.sh
source "$(dirname "$0")/debian-package.sh"
debian_package "qemu: qemu-user" qemu-user-static "The test that runs the arm64 images under emulation"
