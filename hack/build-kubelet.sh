#!/usr/bin/env bash
# Builds the real kubelet that the kubelet end-to-end tests run, from the
# module in hack/kubelet (k8s.io/kubernetes from the Go module proxy), and
# caches it outside the repository, so that every clone and worktree on the
# machine shares one build. The cache key is the sha256 of hack/kubelet/go.sum:
# a version bump (or any dependency change) builds again.
#
#   hack/build-kubelet.sh          build if needed; print the kubelet's path last
#   hack/build-kubelet.sh --path   print the path only, build nothing
#
# MINICRI_CACHE (default /var/cache/minicri-test) moves the cache.
set -euo pipefail
cd "$(dirname "$0")/kubelet"
export PATH="$PATH:/usr/local/go/bin"

version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }' go.mod)
if [ -z "$version" ]; then
	echo "build-kubelet: no 'require k8s.io/kubernetes VERSION' line in hack/kubelet/go.mod" >&2
	exit 1
fi
key=$(sha256sum go.sum | cut -c1-12)
dir="${MINICRI_CACHE:-/var/cache/minicri-test}/kubelet-$version-$key"
out="$dir/kubelet"

if [ "${1:-}" = "--path" ]; then
	echo "$out"
	exit 0
fi

mkdir -p "$dir"
# One build at a time per cache entry: a second caller waits, then reuses.
exec 9>"$dir/.lock"
flock 9
if [ -x "$out" ]; then
	echo "build-kubelet: reusing $out" >&2
	echo "$out"
	exit 0
fi

echo "build-kubelet: building kubelet $version into $out (a few minutes on a cold Go build cache)" >&2
tmp=$(mktemp "$dir/.kubelet.XXXXXX")
trap 'rm -f "$tmp"' EXIT
# GOWORK=off: a go.work above the checkout must not pull minicri's own module in;
# GOTOOLCHAIN=local: build with the installed Go, never download another.
# The version stamp is what kubernetes' own build sets, so that the kubelet
# reports v1.37.2 rather than v0.0.0-master.
major=${version#v}; major=${major%%.*}
minor=${version#v*.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
CGO_ENABLED=0 GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
	go build -trimpath -ldflags "-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean" \
	-o "$tmp" k8s.io/kubernetes/cmd/kubelet
chmod 0755 "$tmp"
"$tmp" --version >&2
mv -f "$tmp" "$out" # a rename: a reader sees the old file or the whole new one
trap - EXIT
echo "$out"
