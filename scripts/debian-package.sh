# Sourced by the scripts that provide a tool the tests need from a Debian package
# (scripts/postgres.sh, scripts/qemu.sh, scripts/shellcheck.sh, scripts/gnupg.sh, scripts/chromium.sh).

# debian_package NAME PACKAGE SKIPPED installs PACKAGE with apt-get when run as root on Debian, and
# says so on stderr under NAME. Otherwise it says what is missing and that SKIPPED (which tests)
# will be skipped, and exits: 1 under CI=true (where a skipped test fails the run), else 0.
debian_package() {
	local name=$1 package=$2 skipped=$3
	if ! command -v apt-get >/dev/null 2>&1 || [[ $(id -u) != 0 ]]; then
		echo "$name: missing; install it (Debian: sudo apt-get install $package). $skipped will be skipped." >&2
		[[ "${CI:-}" == true ]] && exit 1
		exit 0
	fi
	echo "$name: installing the Debian package $package with apt-get..." >&2
	local start=$SECONDS
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >/dev/null
	echo "$name: installed in $((SECONDS - start))s" >&2
}
