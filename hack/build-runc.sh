#!/usr/bin/env bash
# Builds a current runc, for the runtime handler "runc-current" (docs/security.md):
# Debian 12's runc 1.1.5 cannot do idmapped mounts, which user-namespaced pods
# (hostUsers: false) need. The release below comes from the Go module proxy,
# with seccomp, linked statically (libseccomp's archive and glibc's, as runc's
# own release binaries are), so that one build runs on every node the guest
# stage boots, whatever its C library (Debian 11's glibc is older than the
# host's). It is installed beside, never over, Debian's /usr/sbin/runc:
#
#   /usr/local/lib/minicri/runc-VERSION/runc
#
#   hack/build-runc.sh          build if needed; print the runc's path last
#   hack/build-runc.sh --path   print the path only, build nothing
#
# MINICRI_RUNC_PREFIX (default /usr/local/lib/minicri) moves the install.
set -euo pipefail
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

version=v1.5.2
dir="${MINICRI_RUNC_PREFIX:-/usr/local/lib/minicri}/runc-$version"
out="$dir/runc"

if [ "${1:-}" = "--path" ]; then
	echo "$out"
	exit 0
fi
# A dynamically linked one (what this script built before it linked
# statically) is built again.
static() { [ -x "$1" ] && ! ldd "$1" >/dev/null 2>&1; }
if static "$out"; then
	echo "$out"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "build-runc: $out is missing; run as root to build it" >&2
	exit 1
fi

mkdir -p "$dir"
# One build at a time: a second caller waits, then reuses.
exec 9>"$dir/.lock"
flock 9
if static "$out"; then
	echo "$out"
	exit 0
fi

for p in libseccomp-dev pkg-config gcc libc6-dev; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if [ -n "${missing[*]:-}" ]; then
	echo "build-runc: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null >&2; then
		apt-get update -q </dev/null >&2
		apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null >&2
	fi
fi

echo "build-runc: building runc $version into $out (a minute or two)" >&2
gobin=$(mktemp -d "$dir/.gobin.XXXXXX")
trap 'rm -rf "$gobin"' EXIT
# GOWORK=off and a neutral directory: no go.work or go.mod around the checkout
# may take part; GOTOOLCHAIN=local: build with the installed Go, never download
# another. The version stamp is what runc's Makefile sets; netgo and osusergo
# keep glibc's NSS (which cannot be linked statically) out.
(cd / && CGO_ENABLED=1 GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=mod GOBIN="$gobin" \
	go install -trimpath -tags "seccomp netgo osusergo" \
	-ldflags "-X main.version=${version#v} -extldflags -static" \
	"github.com/opencontainers/runc@$version")
"$gobin/runc" --version >&2
if ! static "$gobin/runc"; then
	echo "build-runc: runc $version did not link statically" >&2
	exit 1
fi
if ! "$gobin/runc" features | grep -A3 '"idmap"' | grep -q '"enabled": true'; then
	echo "build-runc: runc $version does not report idmapped mount support" >&2
	exit 1
fi
mv -f "$gobin/runc" "$out" # a rename: a reader sees no file or the whole new one
echo "$out"
