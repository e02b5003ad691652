#!/usr/bin/env bash
# Builds the Kubernetes conformance suite that make conformance runs against
# the kubeadm cluster on minicri (hack/conformance.sh, docs/conformance.md):
# e2e.test (the test binary of k8s.io/kubernetes/test/e2e), ginkgo (its
# parallel runner), and the images its [Conformance] specs run, offline:
# agnhost (and kitten and nautilus, made of it), nonewprivs and the sample
# API server from source, busybox, glibc-dns-testing, nginx and the tools
# agnhost's image carries (dig, nc, socat, curl, bash) from the host's Debian
# packages (hack/install-deps.sh conformance), etcd from the kubelet's cache
# entry, as an OCI layout. Cached outside the repository like the cluster:
# the binaries keyed by the sha256 of hack/conformance/go.sum, the layout
# rebuilt whenever one of the files it holds changes.
#
#   hack/build-conformance.sh         build if needed; print e2e.test's path last
#   hack/build-conformance.sh --path  print the path only, build nothing
#
# Beside e2e.test are ginkgo, images (the program of hack/cluster/images),
# oci/ (the layout; its references are those of KUBE_TEST_REPO_LIST's
# registries below one host: e2e-test-images/agnhost:TAG, conformance/etcd:TAG, ...).
# MINICRI_CACHE (default /var/cache/minicri-test) moves the cache.
set -euo pipefail
arg=${1:-}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/conformance"
export PATH="$PATH:/usr/local/go/bin"

. ../cache-entry.sh
cache_entry conformance k8s.io/kubernetes e2e.test "$arg"

kubelet=$("$here/build-kubelet.sh" --path)
cluster=$("$here/build-cluster.sh" --path)
for f in "$kubelet" "$cluster"; do
	[ -x "$f" ] || { echo "build-conformance: no $f: make cluster builds it first" >&2; exit 1; }
done
kdir=$(dirname "$kubelet") cdir=$(dirname "$cluster")

# As hack/build-cluster.sh: no go.work, the installed Go, kubernetes' version
# stamp (the suite compares it with the server's).
goenv=(env CGO_ENABLED=0 GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly)
major=${version#v}; major=${major%%.*}
minor=${version#v*.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
stamp="-X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"

bins=(e2e.test ginkgo agnhost sample-apiserver nonewprivs)
missing=()
for b in "${bins[@]}"; do
	[ -x "$dir/$b" ] || missing+=("$b")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "build-conformance: building ${missing[*]} ($version) into $dir (e2e.test alone: tens of minutes on a cold Go build cache)" >&2
	# Into a temp dir first, so that a reader of the cache sees no binary
	# or a whole one.
	tmp=$(mktemp -d "$dir/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	list=()
	for b in "${missing[@]}"; do
		case $b in
		e2e.test)
			"${goenv[@]}" go test -c -vet=off -trimpath -ldflags "-s -w $stamp" -o "$tmp/e2e.test" k8s.io/kubernetes/test/e2e ;;
		ginkgo) list+=(github.com/onsi/ginkgo/v2/ginkgo) ;;
		agnhost) list+=(k8s.io/kubernetes/test/images/agnhost) ;;
		sample-apiserver) list+=(k8s.io/sample-apiserver) ;;
		nonewprivs) list+=(k8s.io/kubernetes/test/images/nonewprivs) ;;
		esac
	done
	[ ${#list[@]} -eq 0 ] || "${goenv[@]}" go build -trimpath -ldflags "-s -w $stamp" -o "$tmp/" "${list[@]}"
	for b in "${missing[@]}"; do mv -f "$tmp/$b" "$dir/$b"; done
	rm -rf "$tmp"
	trap - EXIT
fi

# The images program, built here from hack/cluster whenever its source
# changes (the cluster's cache entry keeps the copy it was built with).
src=$(cat ../cluster/go.sum ../cluster/images/*.go | sha256sum | cut -c1-64)
if [ "$(cat "$dir/images.src" 2>/dev/null)" != "$src" ] || [ ! -x "$dir/images" ]; then
	(cd ../cluster && "${goenv[@]}" go build -trimpath -o "$dir/images.new" ./images)
	mv -f "$dir/images.new" "$dir/images"
	echo "$src" >"$dir/images.src"
fi

# The files no host package holds, made anew each time (the layout is rebuilt
# only when they change): the users and groups of each image, busybox's
# applets, nginx's configuration.
kdir_mod=$("${goenv[@]}" go list -m -f '{{.Dir}}' k8s.io/kubernetes)
stage=$dir/stage
rm -rf "$stage"
mkdir -p "$stage"/{base/bin,base/etc,agnhost/etc,agnhost/uploads,nginx/etc/nginx,nginx/var/lib/nginx,nginx/var/log/nginx,nginx/run}
# A link of the stage is copied with its target, which must be in the stage.
cp /bin/busybox "$stage/base/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$stage/base/bin/$a"; done
# Upstream's kitten and nautilus are made on agnhost's Alpine image, and the
# image volume spec reads the os-release of that base through the volume:
# the name and ID of Alpine's (which Alpine release is not known offline).
mkdir -p "$stage/alpine/etc"
printf '%s\n' 'NAME="Alpine Linux"' 'ID=alpine' 'PRETTY_NAME="Alpine Linux"' >"$stage/alpine/etc/os-release"
ln "$dir/agnhost" "$stage/agnhost/agnhost" 2>/dev/null || cp "$dir/agnhost" "$stage/agnhost/agnhost"
ln -s agnhost "$stage/agnhost/agnhost-2"
# The shell of the images whose upstream sh runs the tools on PATH (Alpine's
# ash, Debian's dash): Debian's busybox-static is built to run its own
# applets first, so its sh would run busybox's nc where a spec wants
# netcat-openbsd's.
mkdir -p "$stage/sh/bin"
cp /usr/bin/dash "$stage/sh/bin/dash"
ln -s dash "$stage/sh/bin/sh"
cat >"$stage/base/etc/nsswitch.conf" <<EOF
passwd: files
group: files
hosts: files dns
EOF
# agnhost's image (test/images/agnhost/Dockerfile): a user and a group the
# image defines, the uploads dir, the porter's certificate.
printf '%s\n' "root:x:0:0:root:/root:/bin/sh" "nobody:x:65534:65534:nobody:/:/bin/sh" \
	"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh" >"$stage/agnhost/etc/passwd"
printf '%s\n' "root:x:0:" "nobody:x:65534:" "user-defined-in-image:x:1000:" \
	"group-defined-in-image:x:50000:user-defined-in-image" >"$stage/agnhost/etc/group"
printf '%s\n' "root:x:0:0:root:/root:/bin/sh" "nobody:x:65534:65534:nobody:/:/bin/sh" >"$stage/base/etc/passwd"
printf '%s\n' "root:x:0:" "nobody:x:65534:" >"$stage/base/etc/group"
printf '%s\n' "root:x:0:0:root:/root:/bin/sh" "www-data:x:33:33:www-data:/var/www:/bin/sh" \
	"nobody:x:65534:65534:nobody:/:/bin/sh" >"$stage/nginx/etc/passwd"
printf '%s\n' "root:x:0:" "www-data:x:33:" "nobody:x:65534:" >"$stage/nginx/etc/group"
# nginx in the foreground, logging to the container's output, serving
# Debian's default page on port 80 as the upstream image does.
cat >"$stage/nginx/etc/nginx/nginx.conf" <<EOF
daemon off;
user www-data;
worker_processes 1;
pid /run/nginx.pid;
error_log stderr;
events {}
http {
	include /etc/nginx/mime.types;
	access_log /dev/stdout;
	server {
		listen 80;
		root /usr/share/nginx/html;
	}
}
EOF

# Every tag of e2e.test's image manifest (test/utils/image/manifest.go) of
# the images made here, read from the suite itself (in an order of its own:
# sorted, so that the same images make the same layout).
tags() { awk -F: -v n="/$1" 'substr($1, length($1) - length(n) + 1) == n { print $2 }' <<<"$images_list"; }
images_list=$(env -u KUBE_TEST_REPO_LIST "$dir/e2e.test" --list-images 2>/dev/null | sort)
e2e=e2e-test-images
agnhost_tools=(/usr/bin/bash=/bin/bash /usr/bin/curl /usr/bin/dig /usr/bin/nslookup /usr/bin/host /usr/bin/nc
	/usr/bin/socat /usr/sbin/ip /usr/bin/getent /etc/ssl/certs)
specs=()
agnhost_files="$stage/agnhost=/ $cdir/coredns=/coredns
	$kdir_mod/test/images/agnhost/porter/localhost.crt=/localhost.crt
	$kdir_mod/test/images/agnhost/porter/localhost.key=/localhost.key
	$stage/sh=/ $stage/base=/ ${agnhost_tools[*]}"
for t in $(tags $e2e/agnhost); do specs+=("$e2e/agnhost:$t /agnhost;pause $agnhost_files"); done
# kitten and nautilus (kubectl's Update Demo): agnhost serving a picture.
for n in kitten nautilus; do
	for t in $(tags $e2e/$n); do
		specs+=("$e2e/$n:$t /agnhost;test-webserver $kdir_mod/test/images/$n/html=/ $stage/alpine=/ $agnhost_files")
	done
done
# glibc-dns-testing (the DNS specs' glibc resolver): upstream's is Debian's
# dnsutils on bookworm-slim, with CoreDNS; here the same tools as agnhost's.
for t in $(tags $e2e/glibc-dns-testing); do
	specs+=("$e2e/glibc-dns-testing:$t ;bash $cdir/coredns=/coredns $stage/sh=/ $stage/base=/ ${agnhost_tools[*]}")
done
for t in $(tags $e2e/busybox); do specs+=("$e2e/busybox:$t ;sh $stage/base=/"); done
# nonewprivs (the AllowPrivilegeEscalation specs): upstream's nnp, setuid
# and setgid root as its "chmod +s" makes it, printing its effective uid.
for t in $(tags $e2e/nonewprivs); do
	specs+=("$e2e/nonewprivs:$t ;nnp $dir/nonewprivs=/usr/local/bin/nnp:6755 $stage/base=/")
done
for t in $(tags $e2e/sample-apiserver); do
	specs+=("$e2e/sample-apiserver:$t /kube-sample-apiserver $dir/sample-apiserver=/kube-sample-apiserver $stage/base=/")
done
# The aggregator spec's etcd, a sidecar of the sample API server, is the
# cluster's etcd under the tag the suite names. It and the pause image are
# apart from the cluster's images of the same names (below conformance/):
# the cluster's pause is minicri-pause, which confines itself as a pod's
# infra process and cannot run as a container's; the suite's runs agnhost's
# pause, which does what upstream's pause does: sleep until a signal.
for t in $(tags etcd); do specs+=("conformance/etcd:$t - $kdir/etcd=/usr/local/bin/etcd $stage/base=/"); done
for t in $(tags pause); do specs+=("conformance/pause:$t /agnhost,pause $dir/agnhost=/agnhost"); done
for t in $(tags $e2e/nginx); do
	specs+=("$e2e/nginx:$t /usr/sbin/nginx /usr/sbin/nginx /etc/nginx/mime.types /usr/share/nginx/html $stage/nginx=/ $stage/base=/")
done
# A spec's words may span lines above; the images program wants one line each.
for i in "${!specs[@]}"; do specs[i]=$(tr -s ' \t\n' '   ' <<<"${specs[i]}" | sed 's/ $//'); done
layout "$dir/oci" "$dir/images" "${specs[@]}"
rm -rf "$stage"
echo "$out"
