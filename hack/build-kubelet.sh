#!/usr/bin/env bash
# Builds the real kubelet that the kubelet end-to-end tests run, and beside it
# the kube-apiserver and etcd of the tests that need an API server (mirror
# pods), from the module in hack/kubelet (k8s.io/kubernetes, and the etcd it
# depends on, from the Go module proxy), and caches them outside the
# repository, so that every clone and worktree on the machine shares one
# build. The cache key is the sha256 of hack/kubelet/go.sum: a version bump
# (or any dependency change) builds again.
#
#   hack/build-kubelet.sh          build if needed; print the kubelet's path last
#   hack/build-kubelet.sh --path   print the path only, build nothing
#
# MINICRI_CACHE (default /var/cache/minicri-test) moves the cache.
set -euo pipefail
cd "$(dirname "$0")/kubelet"
export PATH="$PATH:/usr/local/go/bin"

. ../cache-entry.sh
cache_entry kubelet k8s.io/kubernetes kubelet "${1:-}"
if [ -x "$out" ] && [ -x "$dir/kube-apiserver" ] && [ -x "$dir/etcd" ]; then
	echo "build-kubelet: reusing $dir" >&2
	echo "$out"
	exit 0
fi

echo "build-kubelet: building kubelet, kube-apiserver and etcd $version into $dir (several minutes on a cold Go build cache)" >&2
# GOWORK=off: a go.work above the checkout must not pull minicri's own module in;
# GOTOOLCHAIN=local: build with the installed Go, never download another.
# The version stamp is what kubernetes' own build sets, so that the kubelet
# and the API server report v1.37.2 rather than v0.0.0-master.
major=${version#v}; major=${major%%.*}
minor=${version#v*.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
stamp="-X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
tmp=
trap 'rm -f "$tmp"' EXIT
# build NAME PACKAGE: builds into a temp file, then renames it into place,
# so that a reader sees no binary or a whole one; the kubelet goes last, as
# its presence is what --path callers look for.
build() {
	[ -x "$dir/$1" ] && return 0
	tmp=$(mktemp "$dir/.$1.XXXXXX")
	CGO_ENABLED=0 GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
		go build -trimpath -ldflags "-s -w $stamp" -o "$tmp" "$2"
	chmod 0755 "$tmp"
	mv -f "$tmp" "$dir/$1"
	tmp=
}
build etcd ./etcd
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kubelet k8s.io/kubernetes/cmd/kubelet
"$out" --version >&2
trap - EXIT
echo "$out"
