#!/usr/bin/env bash
# Builds what the kubeadm cluster on minicri (hack/cluster.sh, docs/cluster.md)
# needs beyond the kubelet, kube-apiserver and etcd of hack/build-kubelet.sh:
# kubeadm, kubectl, kube-controller-manager, kube-scheduler and kube-proxy
# from k8s.io/kubernetes, CoreDNS from github.com/coredns/coredns (both from
# the Go module proxy, pinned by hack/cluster/go.mod), and the images of the
# control plane, kube-proxy, CoreDNS and pause made from those binaries (and,
# for kube-proxy, the host's iptables), as an OCI layout. Everything is
# cached outside the repository like the kubelet: the binaries keyed by the
# sha256 of hack/cluster/go.sum, the layout rebuilt whenever one of the files
# it holds changes.
#
#   hack/build-cluster.sh PAUSE   build if needed; print kubeadm's path last
#   hack/build-cluster.sh --path  print the path only, build nothing
#
# PAUSE is the pause image's binary (bin/minicri-pause): minicri needs no
# pause container, but kubeadm's preflight pulls the image it names.
# Beside kubeadm are kubectl, ..., images (the program of
# hack/cluster/images), oci/ (the layout) and images.env (the tags of etcd,
# CoreDNS and pause, for the kubeadm configuration).
# MINICRI_CACHE (default /var/cache/minicri-test) moves the cache.
set -euo pipefail
pause=${1:?usage: build-cluster.sh PAUSE | --path}
[ "$pause" = --path ] || pause=$(realpath "$pause")
here=$(cd "$(dirname "$0")" && pwd)
kubelet=$("$here/build-kubelet.sh" --path)
cd "$here/cluster"
export PATH="$PATH:/usr/local/go/bin"

. ../cache-entry.sh
cache_entry cluster k8s.io/kubernetes kubeadm "$pause"

bins=(kubeadm kubectl kube-controller-manager kube-scheduler kube-proxy coredns images)
missing=()
for b in "${bins[@]}"; do
	[ -x "$dir/$b" ] || missing+=("$b")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "build-cluster: building ${missing[*]} ($version) into $dir (several minutes on a cold Go build cache)" >&2
	# As hack/build-kubelet.sh: no go.work, the installed Go, and the
	# version stamp of kubernetes' own build.
	major=${version#v}; major=${major%%.*}
	minor=${version#v*.}; minor=${minor%%.*}
	pkg=k8s.io/component-base/version
	stamp="-X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	declare -A pkgs=(
		[kubeadm]=k8s.io/kubernetes/cmd/kubeadm
		[kubectl]=k8s.io/kubernetes/cmd/kubectl
		[kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
		[kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
		[kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
		[coredns]=./coredns
		[images]=./images
	)
	list=()
	for b in "${missing[@]}"; do list+=("${pkgs[$b]}"); done
	# One go build for all: the packages they share are compiled once, and
	# the binaries land in a temp dir first, so that a reader of the cache
	# sees no binary or a whole one.
	tmp=$(mktemp -d "$dir/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	CGO_ENABLED=0 GOWORK=off GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
		go build -trimpath -ldflags "-s -w $stamp" -o "$tmp/" "${list[@]}"
	for b in "${missing[@]}"; do mv -f "$tmp/$b" "$dir/$b"; done
	rm -rf "$tmp"
	trap - EXIT
fi

# The images, from the kubelet's cache entry (kube-apiserver, etcd), this one
# and the host (kube-proxy's iptables: Debian's iptables-nft, with the
# xtables extensions it loads and the libraries both link).
[ -x "$kubelet" ] || { echo "build-cluster: no kubelet at $kubelet: run hack/build-kubelet.sh first" >&2; exit 1; }
kdir=$(dirname "$kubelet")
etcd_tag=$("$kdir/etcd" --version | awk '/^etcd Version:/ { print $3 }')
coredns_tag=$(awk '$1 == "github.com/coredns/coredns" { print $2 }' go.mod)
pause_tag=$("$dir/kubeadm" config images list --kubernetes-version "$version" 2>/dev/null | sed -n 's#.*/pause:##p')
xtables=(/usr/sbin/iptables /usr/sbin/iptables-save /usr/sbin/iptables-restore
	/usr/sbin/ip6tables /usr/sbin/ip6tables-save /usr/sbin/ip6tables-restore
	/usr/lib/x86_64-linux-gnu/xtables /etc/protocols)
bin=/usr/local/bin
specs=(
	"kube-apiserver:$version - $kdir/kube-apiserver=$bin/kube-apiserver"
	"kube-controller-manager:$version - $dir/kube-controller-manager=$bin/kube-controller-manager"
	"kube-scheduler:$version - $dir/kube-scheduler=$bin/kube-scheduler"
	"kube-proxy:$version - $dir/kube-proxy=$bin/kube-proxy ${xtables[*]}"
	"etcd:$etcd_tag - $kdir/etcd=$bin/etcd"
	"coredns:$coredns_tag /coredns $dir/coredns=/coredns"
	"pause:$pause_tag /pause $pause=/pause"
)
layout "$dir/oci" "$dir/images" "${specs[@]}"
cat >"$dir/images.env.new" <<EOF
KUBERNETES_VERSION=$version
ETCD_TAG=$etcd_tag
COREDNS_TAG=$coredns_tag
PAUSE_TAG=$pause_tag
EOF
mv "$dir/images.env.new" "$dir/images.env"
echo "$out"
