#!/usr/bin/env bash
# Installs the Debian packages minicri and its tests need, only those missing.
# Package installs must not start services: docker-registry would otherwise
# start a registry listening on every address. A temporary policy-rc.d that
# exits 101 blocks service starts; it is removed again only if we made it.
#
#   hack/install-deps.sh         what the daemon and the host tests need
#   hack/install-deps.sh guest   what the guest VM stage needs (make guest-test)
#   hack/install-deps.sh conformance  what the conformance suite's images are
#                                made of (hack/build-conformance.sh)
#   hack/install-deps.sh containerd   Debian's containerd, the CRI of
#                                CLUSTER_CRI=containerd make cluster (the
#                                cross-check of docs/conformance.md)
set -euo pipefail

packages=(
	runc                         # the default OCI runtime
	crun                         # the optional OCI runtime (runtime handler "crun")
	criu                         # CheckpointContainer: runc checkpoint runs it (docs/operations.md)
	containernetworking-plugins  # bridge, host-local, loopback, portmap CNI plugins
	iptables                     # used by the bridge and portmap plugins
	iproute2                     # ip netns, used by tests to inspect namespaces
	busybox-static               # the tests build their images from /bin/busybox
	docker-registry              # a real registry the tests start on 127.0.0.1
	apache2-utils                # htpasswd, for the registry auth tests
	conmon                       # C conmon, only measured side by side in make bench
	gcc                          # builds minicri-pause, the pod infra process (C, static)
	libc6-dev                    # its static libc
	e2fsprogs                    # mkfs.ext4: make bench keeps its daemons' state on an ext4 of its own
)
if [ "${1:-}" = guest ]; then
	packages=(
		debootstrap      # builds the guest's Debian tree (hack/build-guest.sh)
		qemu-system-x86  # boots it
		qemu-utils       # qemu-img: a throwaway overlay per boot
		e2fsprogs        # mkfs.ext4 -d: the guest's disk image from the tree
		openssh-client   # drives the guest
	)
fi
# The tools upstream's test images carry (agnhost's dig, nc, socat; nginx),
# copied from the host into the images with the libraries they link.
if [ "${1:-}" = conformance ]; then
	packages=(
		bind9-dnsutils   # dig: the DNS specs' probes
		netcat-openbsd   # nc
		socat            # agnhost's image has it
		nginx            # the nginx image (its service is never started here)
		jq               # reads ginkgo's JSON report (hack/conformance.sh)
	)
fi

# The same cluster on containerd 1.6, to tell a spec minicri fails from one
# the images or the host fail (docs/cluster.md). It depends on runc, which
# the default group installs already (Debian's /usr/sbin/runc); it is
# never started as a service (the policy below), hack/cluster.sh runs it.
if [ "${1:-}" = containerd ]; then
	packages=(containerd)
fi

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "install-deps: missing Debian packages ${missing[*]}; run as root to install them" >&2
	exit 1
fi

echo "install-deps: installing ${missing[*]}"
policy=/usr/sbin/policy-rc.d
made_policy=
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 0755 "$policy"
	made_policy=1
fi
cleanup() { if [ -n "$made_policy" ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
# Other installs on the machine may hold dpkg's lock for a while: wait for it.
apt_install() { apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" </dev/null; }
if ! apt_install "${missing[@]}"; then
	# A machine whose package lists were never fetched cannot resolve the names.
	apt-get -o DPkg::Lock::Timeout=600 update -q </dev/null
	apt_install "${missing[@]}"
fi
