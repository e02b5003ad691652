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
# crictl is beside critest, in the same directory, and so is busybox-sh:
# the busybox of Debian's package busybox (dynamically linked, unlike
# busybox-static's), whose sh runs commands from PATH where busybox-static's
# runs its own applets: critest's masked-path spec needs a shell that execs
# /bin/ls. The conformance test puts it in its images as /bin/sh.
# MINICRI_CACHE (default /var/cache/minicri-test) moves the cache.
set -euo pipefail
cd "$(dirname "$0")/cri-tools"
export PATH="$PATH:/usr/local/go/bin"

. ../cache-entry.sh
cache_entry cri-tools sigs.k8s.io/cri-tools critest "${1:-}"
if [ -x "$out" ] && [ -x "$dir/crictl" ] && [ -x "$dir/busybox-sh" ]; then
	echo "build-cri-tools: reusing $dir" >&2
	echo "$out"
	exit 0
fi

echo "build-cri-tools: building critest and crictl $version into $dir (a minute or two on a cold Go build cache)" >&2
# busybox-sh: fetched with apt (no install: it conflicts with busybox-static)
# and extracted; the package lists are fetched once if apt knows none.
if [ ! -x "$dir/busybox-sh" ]; then
	deb=$(mktemp -d)
	trap 'rm -rf "$deb"' EXIT
	chown _apt "$deb" 2>/dev/null || true # apt downloads as _apt where it can
	(cd "$deb" && { apt-get download -q busybox </dev/null || { apt-get update -q </dev/null && apt-get download -q busybox </dev/null; }; }) >&2
	dpkg-deb -x "$deb"/busybox_*.deb "$deb/x"
	install -m 0755 "$deb/x/bin/busybox" "$dir/.busybox-sh"
	mv -f "$dir/.busybox-sh" "$dir/busybox-sh"
	rm -rf "$deb"
	trap - EXIT
fi
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
