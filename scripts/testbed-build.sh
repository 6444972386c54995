#!/usr/bin/env bash
# Builds the parts of the local Kubernetes test bed from Go sources: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, and for the real node the kubelet and kube-proxy (from
# the wrapper module internal/testbed/components, which keeps k8s.io/kubernetes out of the
# product's go.mod), CoreDNS (its own wrapper module internal/testbed/coredns), the OCI registry
# the node pulls from (distribution's, its own wrapper module internal/testbed/registry), the
# NetworkPolicy implementation (kube-network-policies, internal/testbed/netpol), kwok (fake nodes
# and pods, for scale) and testbed-pod (the one program of the node's pause and toolbox images).
#
# The real node also runs containerd, runc and the CNI plugins from Debian's packages; run as root,
# this script installs the ones missing with apt-get (and says so). Without root it only says
# what is missing, and the tests that need the real node are skipped (failed under CI=true).
#
# The binaries go to ${OUTPOST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/outpost}/testbed/<key>/bin, where <key> names
# every component version and the Go version, so a fresh clone on a warm machine reuses them and a
# version bump builds a new set next to the old one. Each binary is built into a temporary file and
# renamed into place, so an interrupted build never leaves a half-written binary behind; binaries
# already present are skipped, which makes a second run take well under a second.
#
# The versions are those of scripts/versions.env (K8S_VERSION, ETCD_VERSION, KWOK_VERSION), the
# one place they are defined; internal/testbed/versions.go is generated from the same file, so the
# test bed looks for exactly the directory this script fills.
#
# Usage: scripts/testbed-build.sh            build what is missing, print the bin directory
#        scripts/testbed-build.sh --print-dir print the bin directory only (nothing is built)
set -euo pipefail

# Debian packages of the real node: containerd 1.6 and runc 1.1 (crun fails on cgroup hybrid
# hosts), the CNI plugins (bridge, host-local, loopback, portmap), iptables for kube-proxy and the
# plugins, iproute2 for the node's veth.
# nftables gives nft, with which the test bed sees kube-network-policies' table (the controller
# itself programs nftables through netlink).
NODE_PACKAGES=(containerd runc containernetworking-plugins iptables iproute2 nftables)

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=versions.env
source "$root/scripts/versions.env"
components="$root/internal/testbed/components"

# The components module pins what is really built; a version raised in versions.env alone would
# build the old one under the new name.
for req in "k8s.io/kubernetes $K8S_VERSION" "go.etcd.io/etcd/server/v3 $ETCD_VERSION"; do
	grep -q "^[[:space:]]*$req\$" "$components/go.mod" || {
		echo "testbed-build: internal/testbed/components/go.mod does not require $req, the version scripts/versions.env names;" \
			"raise it there (go get ${req/ /@}, then go mod tidy in that directory) or correct scripts/versions.env" >&2
		exit 1
	}
done

grep -q "^[[:space:]]*sigs.k8s.io/kube-network-policies $NETPOL_VERSION\$" "$root/internal/testbed/netpol/go.mod" || {
	echo "testbed-build: internal/testbed/netpol/go.mod does not require sigs.k8s.io/kube-network-policies $NETPOL_VERSION," \
		"the version scripts/versions.env names; raise it there (go get, then go mod tidy in that directory)" >&2
	exit 1
}

command -v go >/dev/null 2>&1 || {
	echo "testbed-build: Go is not installed; install Go 1.26 or newer from https://go.dev/dl and re-run." >&2
	exit 1
}

go_version="$(go env GOVERSION)"
key="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_${go_version}"
cache="${OUTPOST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/outpost}/testbed"
bin="$cache/$key/bin"

if [[ "${1:-}" == "--print-dir" ]]; then
	echo "$bin"
	exit 0
fi

mkdir -p "$bin"

# install_node_packages installs the missing NODE_PACKAGES, or says why it cannot.
install_node_packages() {
	command -v dpkg-query >/dev/null 2>&1 || {
		echo "testbed-build: not a Debian-based system; the real node needs ${NODE_PACKAGES[*]} (or their equivalents) installed by hand." >&2
		return
	}
	local p missing=()
	for p in "${NODE_PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return
	if [[ $(id -u) != 0 ]]; then
		echo "testbed-build: the test bed's real node needs the Debian packages ${missing[*]}; run this as root" \
			"(or: sudo apt-get install ${missing[*]}). Tests that need the real node will be skipped." >&2
		return
	fi
	echo "testbed-build: installing Debian packages for the test bed's real node with apt-get: ${missing[*]}..."
	local start=$SECONDS
	if DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
		echo "testbed-build: installed ${missing[*]} in $((SECONDS - start))s"
		return
	fi
	# Under CI a test bed without a real node must not pass; elsewhere the tests that need the
	# node are skipped, each saying what is missing.
	if [[ "${CI:-}" == true ]]; then
		echo "testbed-build: installing ${missing[*]} failed (see above); CI=true needs the real node." >&2
		exit 1
	fi
	echo "testbed-build: installing ${missing[*]} failed (see above); tests that need the real node will be skipped." >&2
}
install_node_packages

# Two builds at once (two terminals, parallel CI steps) would each spend minutes of CPU on the same
# binaries; the lock makes the second one wait and then find everything built.
exec 9>"$cache/$key/.build.lock"
if command -v flock >/dev/null 2>&1; then
	if ! flock -n 9; then
		echo "testbed-build: another build of $key is running; waiting for it..."
		flock 9
	fi
fi

tmpfiles=()
cleanup() {
	local f
	for f in "${tmpfiles[@]+"${tmpfiles[@]}"}"; do rm -rf -- "$f"; done
}
trap cleanup EXIT

# install_binary NAME TMPFILE: verifies the build produced an executable and renames it into place.
install_binary() {
	local name="$1" tmp="$2"
	[[ -x "$tmp" ]] || { echo "testbed-build: building $name produced no executable at $tmp" >&2; exit 1; }
	mv -f -- "$tmp" "$bin/$name"
}

# build_components NAME...: builds the missing ones of ./NAME of the components module in one
# `go build`, which schedules the compiles and links of all of them on every core at once (one
# build per binary left a core idle while each linked: about a minute of a cold test bed).
build_components() {
	local name missing=()
	for name in "$@"; do
		[[ -x "$bin/$name" ]] || missing+=("$name")
	done
	((${#missing[@]} == 0)) && return
	echo "testbed-build: building ${missing[*]} (Kubernetes $K8S_VERSION, etcd $ETCD_VERSION) from source" \
		"(about 8 min on 2 cores for all of them, cached afterwards)..."
	local out="$bin/.components.tmp.$$"
	tmpfiles+=("$out")
	mkdir -p "$out"
	local start=$SECONDS
	# gitVersion makes the API server report K8S_VERSION instead of v0.0.0-master: Helm and clients
	# that check the server version (chart kubeVersion constraints) need a real one. etcd links no
	# k8s.io/component-base, so the flags do not touch it.
	local minor="${K8S_VERSION#v1.}"
	minor="${minor%%.*}"
	local ldflags="-X k8s.io/component-base/version.gitVersion=${K8S_VERSION}"
	ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
	ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
	ldflags+=" -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"
	# Static binaries (no cgo): the kubelet and kube-proxy must be, and building every component the
	# same way lets them share one build cache.
	(cd "$components" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/" "${missing[@]/#/./}")
	for name in "${missing[@]}"; do
		install_binary "$name" "$out/$name"
	done
	echo "testbed-build: built ${missing[*]} in $((SECONDS - start))s"
}

build_components etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl

# CoreDNS: rebuilt when the binary reports another version (its module pins COREDNS_VERSION).
if [[ "$("$bin/coredns" -version 2>/dev/null | head -1)" != "CoreDNS-${COREDNS_VERSION#v}" ]]; then
	echo "testbed-build: building coredns $COREDNS_VERSION from source (about 1 min on 2 cores, cached afterwards)..."
	tmp="$bin/.coredns.tmp.$$"
	tmpfiles+=("$tmp")
	start=$SECONDS
	(cd "$root/internal/testbed/coredns" && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$tmp" .)
	install_binary coredns "$tmp"
	echo "testbed-build: built coredns in $((SECONDS - start))s"
fi

# The registry: rebuilt when the binary reports another version (its module pins REGISTRY_VERSION).
if [[ "$("$bin/registry" --version 2>/dev/null | awk '{print $3}')" != "${REGISTRY_VERSION}+unknown" ]]; then
	echo "testbed-build: building registry (distribution $REGISTRY_VERSION) from source (about 1-3 min on 2 cores, cached afterwards)..."
	tmp="$bin/.registry.tmp.$$"
	tmpfiles+=("$tmp")
	start=$SECONDS
	(cd "$root/internal/testbed/registry" && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$tmp" .)
	install_binary registry "$tmp"
	echo "testbed-build: built registry in $((SECONDS - start))s"
fi

# kube-network-policies, the real node's NetworkPolicy implementation: rebuilt when the binary's
# stamp (NETPOL_VERSION and a digest of its wrapper module's files) differs. Its module is built
# from a copy in a temporary directory whose go.mod replaces github.com/google/nftables with a
# copy of the module cache's, whose file expr/queue.go is replaced by the file queue.go.overlay of internal/testbed/netpol:
# that file says why (kernels without nft_queue). Nothing of either module is kept in the repository
# but that one file; go build -overlay cannot replace files of the module cache.
netpol="$root/internal/testbed/netpol"
netpol_stamp="${NETPOL_VERSION}-$(cat "$netpol/go.mod" "$netpol/go.sum" "$netpol/main.go" "$netpol/queue.go.overlay" | sha256sum | cut -c1-12)"
if [[ "$("$bin/kube-network-policies" --version 2>/dev/null)" != "$netpol_stamp" ]]; then
	echo "testbed-build: building kube-network-policies $NETPOL_VERSION from source (about 1 min on 2 cores, cached afterwards)..."
	start=$SECONDS
	work="$(mktemp -d "$bin/.netpol.tmp.XXXXXX")"
	tmpfiles+=("$work")
	nftables_dir="$(cd "$netpol" && GOWORK=off go list -m -f '{{.Dir}}' github.com/google/nftables)"
	cp -R "$nftables_dir" "$work/nftables"
	chmod -R u+w "$work/nftables"
	cp "$netpol/queue.go.overlay" "$work/nftables/expr/queue.go"
	mkdir "$work/netpol"
	cp "$netpol/go.mod" "$netpol/go.sum" "$netpol/main.go" "$work/netpol/"
	(cd "$work/netpol" && GOWORK=off go mod edit -replace github.com/google/nftables=../nftables &&
		GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-X main.stamp=$netpol_stamp" -o "$work/kube-network-policies" .)
	install_binary kube-network-policies "$work/kube-network-policies"
	echo "testbed-build: built kube-network-policies in $((SECONDS - start))s"
fi

# testbed-pod is part of this repository, so it is rebuilt every time (under a second when
# unchanged) and replaced only when it changed. Static: it is the only file of its images.
tmp="$bin/.testbed-pod.tmp.$$"
tmpfiles+=("$tmp")
(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$tmp" ./internal/testbed/cmd/testbed-pod)
if cmp -s "$tmp" "$bin/testbed-pod"; then
	rm -f -- "$tmp"
else
	install_binary testbed-pod "$tmp"
fi

if [[ ! -x "$bin/kwok" ]]; then
	echo "testbed-build: building kwok $KWOK_VERSION from source (about 1-2 min on 2 cores, cached afterwards)..."
	gobin="$(mktemp -d "$bin/.kwok.tmp.XXXXXX")"
	tmpfiles+=("$gobin")
	start=$SECONDS
	# Run outside the repository so the product's go.mod plays no part in resolving kwok's modules.
	(cd "$gobin" && GOBIN="$gobin" GOFLAGS="${GOFLAGS:-} -trimpath" go install "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}")
	install_binary kwok "$gobin/kwok"
	echo "testbed-build: built kwok in $((SECONDS - start))s"
fi

echo "testbed-build: test bed binaries are in $bin"
