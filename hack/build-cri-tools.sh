#!/usr/bin/env bash
# Builds critest (the CRI validation suite) and crictl from the module in
# hack/cri-tools (sigs.k8s.io/cri-tools from the Go module proxy), and caches
# them outside the repository, so that every clone and worktree on the machine
# shares one build. The cache key is the sha256 of hack/cri-tools/go.sum: a
# version bump (or any dependency change) builds again.
#
#   hack/build-cri-tools.sh          build if needed; print critest's path last
#   hack/build-cri-tools.sh --path   print the path only, build nothing
#
# crictl is beside critest, in the same directory.
# MINICRI_CACHE (default /var/cache/minicri-test) moves the cache.
set -euo pipefail
cd "$(dirname "$0")/cri-tools"
export PATH="$PATH:/usr/local/go/bin"

# The require line, alone or in a require block.
version=$(awk '$1 == "require" && $2 == "sigs.k8s.io/cri-tools" { print $3; exit } $1 == "sigs.k8s.io/cri-tools" && $2 ~ /^v/ { print $2; exit }' go.mod)
if [ -z "$version" ]; then
	echo "build-cri-tools: no require of sigs.k8s.io/cri-tools in hack/cri-tools/go.mod" >&2
	exit 1
fi
key=$(sha256sum go.sum | cut -c1-12)
dir="${MINICRI_CACHE:-/var/cache/minicri-test}/cri-tools-$version-$key"
out="$dir/critest"

if [ "${1:-}" = "--path" ]; then
	echo "$out"
	exit 0
fi

mkdir -p "$dir"
# One build at a time per cache entry: a second caller waits, then reuses.
exec 9>"$dir/.lock"
flock 9
if [ -x "$out" ] && [ -x "$dir/crictl" ]; then
	echo "build-cri-tools: reusing $dir" >&2
	echo "$out"
	exit 0
fi

echo "build-cri-tools: building critest and crictl $version into $dir (a minute or two on a cold Go build cache)" >&2
# GOWORK=off: a go.work above the checkout must not pull minicri's own module in;
# GOTOOLCHAIN=local: build with the installed Go, never download another.
# The version stamp is what cri-tools' own Makefile sets.
stamp="-X sigs.k8s.io/cri-tools/pkg/version.Version=${version#v}"
tmp=
trap 'rm -f "$tmp"' EXIT
# build NAME GO-COMMAND... PACKAGE: builds into a temp file, then renames it
# into place, so that a reader sees no binary or a whole one; critest goes
# last, as its presence is what --path callers look for.
build() {
	local name=$1 pkg=${*: -1}
	[ -x "$dir/$name" ] && return 0
	tmp=$(mktemp "$dir/.$name.XXXXXX")
	CGO_ENABLED=0 GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
		go "${@:2:$#-2}" -o "$tmp" -trimpath -ldflags "-s -w $stamp" "$pkg"
	chmod 0755 "$tmp"
	mv -f "$tmp" "$dir/$name"
	tmp=
}
build crictl build sigs.k8s.io/cri-tools/cmd/crictl
# critest is a test binary: cmd/critest holds only a ginkgo suite.
build critest test -c sigs.k8s.io/cri-tools/cmd/critest
"$out" -version >&2
trap - EXIT
echo "$out"
