#!/usr/bin/env bash
# Fails when a tracked file is larger than 1 MiB, unless scripts/large-files-allowed.txt names it
# (test data that has to be that large). A committed binary (a 22 MB orchestrator build once was)
# makes every clone pay for it for ever, even after it is deleted; catching it before the commit
# spreads is the only cheap moment. Sizes are those in the index (what a commit would record),
# not of the working tree.
#
# Usage: scripts/large-files.sh   (from anywhere inside the repository)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

limit=$((1 << 20))
allowed="scripts/large-files-allowed.txt"

declare -A ok=()
if [[ -f "$allowed" ]]; then
	while IFS= read -r line; do
		line="${line%%#*}"
		line="${line%"${line##*[![:space:]]}"}"
		[[ -n "$line" ]] && ok["$line"]=1
	done <"$allowed"
fi

# ls-files -s: "<mode> <blob> <stage>\t<path>"; cat-file gives each blob's size. Submodules
# (mode 160000) have no blob here.
too_large=()
while IFS=$'\t' read -r size path; do
	if ((size > limit)) && [[ -z "${ok[$path]:-}" ]]; then
		too_large+=("$(printf '%8d KiB  %s' $((size >> 10)) "$path")")
	fi
done < <(git ls-files -s -z | tr '\0' '\n' | awk '$1 != "160000" { split($0, a, "\t"); print $2 "\t" a[2] }' |
	git cat-file --batch-check='%(objectsize)	%(rest)' | awk -F'\t' 'NF == 2 { print $1 "\t" $2 }')

if ((${#too_large[@]} > 0)); then
	{
		echo "large-files: tracked files over 1 MiB:"
		printf '  %s\n' "${too_large[@]}"
		echo "Remove them from the index (git rm --cached PATH, and ignore build outputs in .gitignore),"
		echo "or, for test data that must be this large, add the path to $allowed with a comment saying why."
	} >&2
	exit 1
fi
