#!/usr/bin/env bash
# Provisions the command-line tools the tests and `make lint` / `make generate` need, built from
# source through the Go module proxy (the only download channel some machines have), into
# ${OUTPOST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/outpost}/tools/<name>-<version>/<name>.
# A tool already there is not rebuilt, so a second run takes well under a second. Each binary is
# built to a temporary name and renamed into place: an interrupted build leaves nothing half-made.
# The versions are those of scripts/versions.env, the one place they are defined.
#
#   tofu           OpenTofu, built from its module in the Go module cache (`go install` of it is
#                  refused because its go.mod has replace directives); about 3 min cold
#   golangci-lint  about 3 min cold
#   tfplugindocs   about 1 min cold
#   deadcode       golang.org/x/tools/cmd/deadcode; about 1 min cold
#   goreleaser     the release build (.goreleaser.yml); about 8 min cold
#   helm           the helm CLI, for the test that installs the chart from its OCI artifact;
#                  about 2 min cold
#   actionlint     checks the GitHub workflows (`make lint`); about 30 s cold
#   cosign         signs images, the chart and blobs (the release test's dry run of the
#                  release's signing); about 6 min cold
#   terraform      not built: checked at $TERRAFORM or /usr/local/bin/terraform
#
# Usage: scripts/tools.sh                 provision everything, print "name: path" lines
#        scripts/tools.sh tofu ...        provision only the named tools
#        scripts/tools.sh --path tofu     provision one tool and print only its path (for scripts
#                                         and the GNUmakefile: TOFU=$(scripts/tools.sh --path tofu));
#                                         progress goes to stderr
set -euo pipefail

# shellcheck source=versions.env
source "$(dirname "${BASH_SOURCE[0]}")/versions.env"

tools="${OUTPOST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/outpost}/tools"

say() { if [[ "$path_only" == 0 ]]; then echo "$@"; else echo "$@" >&2; fi; }
die() { echo "tools: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "Go is not installed; install Go 1.26 or newer from https://go.dev/dl and re-run."

tmpdirs=()
cleanup() {
	local d
	for d in "${tmpdirs[@]+"${tmpdirs[@]}"}"; do rm -rf -- "$d"; done
}
trap cleanup EXIT

# begin NAME VERSION: prints nothing and returns 1 if NAME is already built; otherwise takes the
# tool's lock (two concurrent runs build once) and returns 0 if it still needs building.
begin() {
	local name="$1" version="$2" dir="$tools/$1-$2"
	[[ -x "$dir/$name" ]] && return 1
	mkdir -p "$dir"
	exec 8>"$dir/.build.lock"
	if command -v flock >/dev/null 2>&1 && ! flock -n 8; then
		say "tools: another build of $name $version is running; waiting for it..."
		flock 8
	fi
	[[ ! -x "$dir/$name" ]]
}

# finish NAME VERSION BUILT: renames the freshly built binary into place.
finish() {
	local name="$1" version="$2" built="$3"
	[[ -x "$built" ]] || die "building $name $version produced no executable at $built"
	mv -f -- "$built" "$tools/$name-$version/$name"
	exec 8>&-
}

scratch() {
	local d
	d="$(mktemp -d "$tools/.build.XXXXXX")"
	tmpdirs+=("$d")
	echo "$d"
}

tofu() {
	local name=tofu version="$TOFU_VERSION"
	if begin "$name" "$version"; then
		say "tools: building OpenTofu $version from source (about 3 min on 2 cores, cached afterwards)..."
		local start=$SECONDS dir tmp
		tmp="$(scratch)"
		# Resolve the module by itself, outside any main module.
		dir="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "github.com/opentofu/opentofu@$version" |
			sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
		[[ -n "$dir" && -d "$dir" ]] || die "go mod download github.com/opentofu/opentofu@$version gave no module directory"
		# The module directory is read-only, which is fine: the build writes only to the build
		# cache and -o. -mod=readonly uses its go.mod and go.sum (with its replace directives) as is.
		# Flags as in OpenTofu's .goreleaser.yaml: a static binary, and version.dev=no so it
		# reports "X.Y.Z" rather than "X.Y.Z-dev" (a prerelease satisfies no `>=` version
		# constraint, which breaks required_version checks and terraform-plugin-testing).
		(cd "$dir" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -trimpath" \
			go build -ldflags "-s -w -X 'github.com/opentofu/opentofu/version.dev=no'" -o "$tmp/$name" ./cmd/tofu)
		"$tmp/$name" version 2>/dev/null | grep -q "^OpenTofu ${version}\$" ||
			die "the OpenTofu built reports \"$("$tmp/$name" version 2>/dev/null | head -1)\", want \"OpenTofu ${version}\""
		finish "$name" "$version" "$tmp/$name"
		say "tools: built OpenTofu in $((SECONDS - start))s"
	fi
	report "$name" "$tools/$name-$version/$name"
}

# goinstall NAME VERSION PACKAGE MINUTES: builds a tool with go install, outside this module.
goinstall() {
	local name="$1" version="$2" pkg="$3" minutes="$4"
	if begin "$name" "$version"; then
		say "tools: building $name $version from source (about $minutes on 2 cores, cached afterwards)..."
		local start=$SECONDS tmp
		tmp="$(scratch)"
		(cd "$tmp" && GOBIN="$tmp" GOFLAGS="-trimpath" go install "$pkg@$version")
		finish "$name" "$version" "$tmp/$name"
		say "tools: built $name in $((SECONDS - start))s"
	fi
	report "$name" "$tools/$name-$version/$name"
}

golangci_lint() {
	goinstall golangci-lint "$GOLANGCI_VERSION" github.com/golangci/golangci-lint/v2/cmd/golangci-lint "3 min"
}

tfplugindocs() {
	goinstall tfplugindocs "$TFPLUGINDOCS_VERSION" github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs "1 min"
}

deadcode() {
	goinstall deadcode "$XTOOLS_VERSION" golang.org/x/tools/cmd/deadcode "1 min"
}

goreleaser() {
	goinstall goreleaser "$GORELEASER_VERSION" github.com/goreleaser/goreleaser/v2 "8 min"
}

helm() {
	goinstall helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm "2 min"
}

actionlint() {
	goinstall actionlint "$ACTIONLINT_VERSION" github.com/rhysd/actionlint/cmd/actionlint "30 s"
}

cosign() {
	goinstall cosign "$COSIGN_VERSION" github.com/sigstore/cosign/v3/cmd/cosign "6 min"
}

terraform() {
	local tf="${TERRAFORM:-}"
	if [[ -z "$tf" ]]; then
		if [[ -x /usr/local/bin/terraform ]]; then
			tf=/usr/local/bin/terraform
		else
			tf="$(command -v terraform || true)"
		fi
	fi
	if [[ -z "$tf" || ! -x "$tf" ]]; then
		local v="${TERRAFORM_VERSION#v}"
		die "terraform not found (looked at \$TERRAFORM, /usr/local/bin/terraform and PATH). Install Terraform $v or newer:
  download https://releases.hashicorp.com/terraform/$v/terraform_${v}_linux_amd64.zip, unzip it,
  and put the terraform binary at /usr/local/bin/terraform (or set TERRAFORM=/path/to/terraform)."
	fi
	"$tf" version >/dev/null 2>&1 || die "$tf does not run (\`$tf version\` failed)"
	report terraform "$tf"
}

path_only=0
report() {
	if [[ "$path_only" == 1 ]]; then echo "$2"; else printf '%-14s %s\n' "$1:" "$2"; fi
}

run_tool() {
	case "$1" in
	tofu | opentofu) tofu ;;
	golangci-lint) golangci_lint ;;
	tfplugindocs) tfplugindocs ;;
	deadcode) deadcode ;;
	goreleaser) goreleaser ;;
	helm) helm ;;
	actionlint) actionlint ;;
	cosign) cosign ;;
	terraform) terraform ;;
	*) die "unknown tool $1 (known: tofu, golangci-lint, tfplugindocs, deadcode, goreleaser, helm, actionlint, cosign, terraform)" ;;
	esac
}

mkdir -p "$tools"
if [[ "${1:-}" == "--path" ]]; then
	[[ $# == 2 ]] || die "usage: scripts/tools.sh --path TOOL"
	path_only=1
	run_tool "$2"
	exit 0
fi
if [[ $# == 0 ]]; then
	set -- terraform tofu golangci-lint tfplugindocs deadcode goreleaser helm actionlint cosign
fi
for t in "$@"; do
	run_tool "$t"
done
