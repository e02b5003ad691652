#!/usr/bin/env bash
# Builds the guest VM of the guest test stage (make guest-test,
# docs/development.md): a Debian node with systemd as PID 1, cgroup v2 only,
# AppArmor on and the release's stock kernel, from Debian's packages only.
# RELEASE is bookworm (Debian 12, kernel 6.1: the default), trixie (Debian
# 13, 6.12) or bullseye (Debian 11, 5.10). It is cached outside the repository like the kubelet, so
# every clone and worktree on the machine shares one build:
#
#   DIR/vmlinuz      the guest's kernel, booted by qemu -kernel
#   DIR/initrd.img   a small initrd (virtio and ext4 only)
#   DIR/rootfs.img   a raw ext4 disk; every boot writes to a throwaway overlay
#   DIR/id_ed25519   the ssh key root in the guest accepts
#   DIR/packages     the guest's package versions (dpkg -l)
#
# DIR is $MINICRI_CACHE/guest-RELEASE-KEY, KEY the sha256 of this script
# (which holds the package lists and the whole configuration): any change to
# it builds every release again.
#
#   hack/build-guest.sh [RELEASE]          build if needed; print DIR last
#   hack/build-guest.sh --path [RELEASE]   print DIR only, build nothing
#
# MINICRI_CACHE (default /var/cache/minicri-test) moves the cache. Needs root,
# debootstrap and Debian's mirror (the one the host's apt uses, read at run time).
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

path_only=
if [ "${1:-}" = "--path" ]; then
	path_only=1
	shift
fi
suite=${1:-bookworm}
case "$suite" in
bookworm | trixie | bullseye) ;;
*)
	echo "build-guest: release $suite: want bookworm, trixie or bullseye" >&2
	exit 2
	;;
esac
# What the guest runs beyond debootstrap's minbase. runc is not among them:
# every release runs the static runc v1.5.2 that make deps builds
# (hack/build-runc.sh), from the test's 9p share.
packages=(
	systemd-sysv udev kmod dbus          # systemd as PID 1; runc's systemd driver talks D-Bus
	linux-image-amd64 initramfs-tools zstd
	iproute2 iptables containernetworking-plugins # pod networks: bridge, host-local, portmap
	openssh-server                       # how the host drives the guest
	libseccomp2                          # runc v1.5.2 links it
	apparmor                             # the parser that loads minicri's default profile
	procps psmisc jq curl                # what the tests inspect the guest with
)
# What only some releases have: installed where the release has a candidate,
# and then named in DIR/packages; the tests that need a missing one skip
# saying which.
optional=(
	criu # CheckpointContainer
)

script="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
key=$(sha256sum "$script" | cut -c1-12)
dir="${MINICRI_CACHE:-/var/cache/minicri-test}/guest-$suite-$key"

if [ -n "$path_only" ]; then
	echo "$dir"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "build-guest: must run as root (debootstrap, chroot)" >&2
	exit 1
fi
for tool in debootstrap mkfs.ext4 ssh-keygen; do
	if ! command -v "$tool" >/dev/null; then
		echo "build-guest: $tool is missing; run hack/install-deps.sh guest" >&2
		exit 1
	fi
done

mkdir -p "$dir"
# One build at a time per cache entry: a second caller waits, then reuses.
exec 9>"$dir/.lock"
flock 9
if [ -f "$dir/vmlinuz" ] && [ -f "$dir/initrd.img" ] && [ -f "$dir/rootfs.img" ] && [ -f "$dir/id_ed25519" ]; then
	echo "build-guest: reusing $dir" >&2
	echo "$dir"
	exit 0
fi

# Debian's mirror: the one the host's apt fetches $suite (or, on a host of
# another release, its plain debian archive) from.
mirror=$(apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 'Created-By: Packages' 2>/dev/null |
	awk -v s="$suite" '$1 == s { print $2; exit }')
if [ -z "$mirror" ]; then
	mirror=$(apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 'Created-By: Packages' 2>/dev/null |
		awk '$1 !~ /-/ && $2 !~ /security/ { print $2; exit }')
fi
if [ -z "$mirror" ]; then
	echo "build-guest: no Debian mirror in the host's apt sources (apt-get update first?)" >&2
	exit 1
fi

start=$(date +%s)
work=$(mktemp -d "$dir/.work.XXXXXX")
root="$work/root"
mounted=()
cleanup() {
	for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
		umount "${mounted[$i]}" 2>/dev/null || umount -l "${mounted[$i]}" || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

echo "build-guest: debootstrap $suite into $root (a few minutes)" >&2
debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
	tail -30 "$work/debootstrap.log" >&2
	exit 1
}

# The configuration goes in before the packages, so that their installation
# builds the small initrd once.
mkdir -p "$root/etc/initramfs-tools/conf.d"
printf 'MODULES=list\nCOMPRESS=zstd\n' >"$root/etc/initramfs-tools/conf.d/minicri-guest.conf"
mkdir -p "$root/etc/initramfs-tools"
printf 'virtio_pci\nvirtio_blk\next4\n' >"$root/etc/initramfs-tools/modules"

# Install with /proc, /sys and /dev bound for the chroot only, no service
# started, and the host's resolver for the mirror.
for m in proc sys dev dev/pts; do
	mount --bind "/$m" "$root/$m"
	mounted+=("$root/$m")
done
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
echo "deb $mirror $suite main" >"$root/etc/apt/sources.list"
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get update -q >"$work/apt.log" 2>&1 || {
	tail -30 "$work/apt.log" >&2
	exit 1
}
for p in "${optional[@]}"; do
	if [[ "$(chroot "$root" apt-cache policy "$p" 2>/dev/null)" == *"Candidate: "[0-9]* ]]; then
		packages+=("$p")
	else
		echo "build-guest: $suite has no $p" >&2
	fi
done
echo "build-guest: installing ${packages[*]}" >&2
chroot "$root" env DEBIAN_FRONTEND=noninteractive \
	apt-get install -y -q --no-install-recommends "${packages[@]}" >>"$work/apt.log" 2>&1 || {
	tail -30 "$work/apt.log" >&2
	exit 1
}
chroot "$root" dpkg -l >"$work/packages"
chroot "$root" apt-get clean
rm -rf "$root/var/lib/apt/lists/"* "$root/usr/sbin/policy-rc.d"
for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[$i]}"; done
mounted=()

# No name of the mirror stays in the image.
: >"$root/etc/apt/sources.list"
printf 'nameserver 127.0.0.1\n' >"$root/etc/resolv.conf"

echo minicri-guest >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 minicri-guest\n' >"$root/etc/hosts"
# Every boot is a fresh node: systemd makes a new machine id.
: >"$root/etc/machine-id"

# The disk, and the host's share (bin/, runc, kubelet, images of one test
# run): mounted on first access, after systemd-modules-load has loaded 9p
# (mounting it during boot raced the driver).
mkdir -p "$root/mnt/host"
cat >"$root/etc/fstab" <<'EOF'
/dev/vda / ext4 rw,errors=remount-ro 0 1
host /mnt/host 9p trans=virtio,version=9p2000.L,msize=1048576,x-systemd.automount,nofail 0 0
EOF
cat >"$root/etc/modules-load.d/minicri-guest.conf" <<'EOF'
9p
9pnet_virtio
tun
overlay
br_netfilter
EOF
cat >"$root/etc/sysctl.d/90-minicri-guest.conf" <<'EOF'
net.ipv4.ip_forward = 1
net.bridge.bridge-nf-call-iptables = 1
EOF

# qemu's user-mode network: a static address, no DHCP and no wait for it.
mkdir -p "$root/etc/systemd/network"
cat >"$root/etc/systemd/network/10-guest.network" <<'EOF'
[Match]
Name=en* eth*

[Network]
Address=10.0.2.15/24
Gateway=10.0.2.2
EOF
chroot "$root" systemctl enable systemd-networkd.service >/dev/null 2>&1
for unit in systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer \
	e2scrub_all.timer e2scrub_reap.service fstrim.timer man-db.timer systemd-timesyncd.service; do
	ln -sf /dev/null "$root/etc/systemd/system/$unit"
done

# The journal in memory only: the cached image stays as built.
mkdir -p "$root/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\n' >"$root/etc/systemd/journald.conf.d/volatile.conf"

# root logs in with the key made here, and only with it.
ssh-keygen -q -t ed25519 -N '' -C minicri-guest -f "$work/id_ed25519"
install -d -m 0700 "$root/root/.ssh"
install -m 0600 "$work/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
mkdir -p "$root/etc/ssh/sshd_config.d"
printf 'PasswordAuthentication no\nUseDNS no\n' >"$root/etc/ssh/sshd_config.d/minicri-guest.conf"

# Kernel and initrd beside the image: qemu boots them directly.
kernel=$(ls "$root"/boot/vmlinuz-* | sort -V | tail -1)
initrd=$(ls "$root"/boot/initrd.img-* | sort -V | tail -1)
cp "$kernel" "$work/vmlinuz"
cp "$initrd" "$work/initrd.img"

echo "build-guest: making the disk image" >&2
truncate -s 6G "$work/rootfs.img"
mkfs.ext4 -q -L root -d "$root" "$work/rootfs.img"

# Into place; rootfs.img last, the others test for it.
for f in vmlinuz initrd.img id_ed25519 id_ed25519.pub packages; do
	mv -f "$work/$f" "$dir/$f"
done
mv -f "$work/rootfs.img" "$dir/rootfs.img"
echo "build-guest: built $dir in $(($(date +%s) - start)) s ($(basename "$kernel"))" >&2
echo "$dir"
