#!/usr/bin/env bash
# A single-node kubeadm cluster on this host with minicri as the CRI
# (make cluster / make cluster-down; docs/cluster.md).
#
#   hack/cluster.sh up     bring it up and leave it running
#   hack/cluster.sh down   take it down and check that nothing is left
#
# NODES=2 hack/cluster.sh up: the production-shaped guest joins as a second
# node (hack/cluster-node.sh).
#
# CLUSTER_CRI=containerd hack/cluster.sh up: the same cluster (the same
# kubeadm configuration, images, registry, CNI template, kubelet) with
# Debian's containerd 1.6 as the CRI instead of minicri, to tell what
# minicri fails from what the images or this host fail (docs/cluster.md,
# docs/conformance.md). down takes down whichever up brought up.
#
# up runs, as an operator with a private registry would: a loopback registry
# serving the images hack/build-cluster.sh made (kubeadm's imageRepository),
# minicri with a cni.conf_template (the pod CIDR the controller-manager
# allocates reaches it through UpdateRuntimeConfig), kubeadm init with
# --cri-socket unix:///run/minicri/minicri.sock, and the kubelet with the
# configuration and flags kubeadm wrote. The kubelet pulls every image through
# minicri's PullImage and runs etcd, kube-apiserver, kube-controller-manager
# and kube-scheduler as static pods, kube-proxy and CoreDNS as a DaemonSet and
# a Deployment, all as minicri's pods. The admin kubeconfig is kubeadm's
# /etc/kubernetes/admin.conf; STATE/env names the registry and kubectl.
#
# Where this host is not a production node, the script overrides, and says why
# where it does (search for "this host"):
#   - no systemd as PID 1: kubeadm cannot start the kubelet (it warns), so the
#     script starts it, in the background, with what kubeadm's systemd drop-in
#     would pass: --config /var/lib/kubelet/config.yaml, the kubeconfigs and
#     the flags of /var/lib/kubelet/kubeadm-flags.env;
#   - cgroup v1, which the kubelet refuses by default: failCgroupV1: false,
#     cgroupDriver cgroupfs (minicri's on this host); the preflight checks
#     that fail on it are ignored by name (ignorePreflightErrors below);
#   - a shared development host: the kernel settings the kubelet makes sure
#     of at start (panic on oops, overcommit, ...) are covered, in the
#     kubelet's own mount namespace, by files holding the values it wants, as
#     the e2e suite does; kube-proxy is told not to change conntrack or
#     route_localnet; the sysctls the cluster needs (ip_forward) are put back
#     by down; the upstream DNS server is not forwarded to (the host is
#     offline): CoreDNS answers the cluster's names only;
#   - an uplink that answers TCP port 80 of every address: what is sent to the
#     service range and names no port of a Service is refused on this host
#     instead of routed off it (svc_chain below).
#
# MINICRI_BIN (default bin/ of this checkout) holds minicri, its monitor and
# minicri-pause; MINICRI_CLUSTER_STATE (default /var/lib/minicri-cluster)
# keeps the logs, pids, configurations and the registry's storage until down.
set -euo pipefail
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${MINICRI_BIN:-$repo/bin}
state=${MINICRI_CLUSTER_STATE:-/var/lib/minicri-cluster}
admin=/etc/kubernetes/admin.conf
# The pod and service networks: 10.250/16 and 10.251/16, beside the e2e
# suite's bridges (10.200-249.x.0/24), so that a cluster and the suite can
# share the host.
pod_subnet=10.250.0.0/16
service_subnet=10.251.0.0/16
bridge=minicri-k8s0
# The chain, jumped to from FORWARD and OUTPUT, that refuses what is sent
# to the service range and was not translated: by the filter table a packet
# kube-proxy translated has a pod's address, so one that still has a
# ClusterIP names no port of a Service (a port just taken off one). In
# iptables mode kube-proxy leaves such a packet to the network (its nftables
# mode refuses it itself), and this host's uplink answers TCP port 80 of
# every address: the Service spec that takes a port off would reach it.
svc_chain=MINICRI-K8S-SVC
# The sysctls the cluster changes on the host (ip_forward: a pod reaching a
# ClusterIP is DNATed to another pod and forwarded), restored by down.
sysctls=(net/ipv4/ip_forward)
# The kernel settings the kubelet makes sure of at start, with the values it
# wants (test/e2e's kubeletTunables): the kubelet sees these, the host keeps its own.
tunables=(vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1
	kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000)

# The host paths a cluster makes (kubeadm, the kubelet and its hostPath
# volumes, minicri): up records which did not exist, down removes those.
host_paths=(/etc/kubernetes /var/lib/kubelet /var/lib/etcd /var/log/pods /var/log/containers
	/lib/modules /run/xtables.lock /usr/libexec/kubernetes /run/minicri /run/minicri-cluster /run/minicri-cluster-rootfs)

log() { echo "cluster: $*" >&2; }
die() { log "$*"; exit 1; }

# set_cri NAME: the CRI the cluster runs on, minicri or containerd; sets
# cri_name, socket and cri (kubeadm's and the kubelet's endpoint), and adds
# the host paths containerd makes outside its own dirs.
set_cri() {
	cri_name=$1
	case $cri_name in
	minicri) socket=/run/minicri/minicri.sock ;;
	containerd)
		# Its socket, root and state dirs are the cluster's own (below
		# STATE/containerd), so that no containerd of the host is touched.
		# It still makes /run/containerd (the shims' sockets, whose dir
		# containerd 1.6 does not take from its state dir), the CNI
		# library's cache /var/lib/cni, and its network namespaces in
		# /run/netns (down checks those apart: the dir is shared).
		socket=$state/containerd/containerd.sock
		host_paths+=(/run/containerd /var/lib/cni /opt/containerd)
		;;
	*) die "CLUSTER_CRI=$cri_name: minicri or containerd" ;;
	esac
	cri=unix://$socket
}

# wait_for SECONDS WHAT CMD...: runs CMD every second until it succeeds;
# fails naming WHAT after SECONDS.
wait_for() {
	local secs=$1 what=$2 i
	shift 2
	for ((i = 0; i < secs; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 1
	done
	log "gave up after ${secs}s waiting for $what"
	return 1
}

# gone PID: the process has exited (a zombie not yet reaped counts as gone).
gone() { [ ! -d "/proc/$1" ] || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }

# start NAME CMD...: runs CMD in the background in a session of its own, its
# output in STATE/NAME.log, its pid in STATE/NAME.pid.
start() {
	local name=$1
	shift
	setsid "$@" >"$state/$name.log" 2>&1 </dev/null &
	echo $! >"$state/$name.pid"
}

# stop NAME: stops the process STATE/NAME.pid names (SIGTERM, then SIGKILL
# after 20 s), if it is still the one started: a pid of a process gone may be
# another's by now, so its command line must name the recorded binary.
stop() {
	local name=$1 pidf=$state/$1.pid pid i
	[ -f "$pidf" ] || return 0
	pid=$(cat "$pidf")
	if [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$(cat "$state/$name.cmd" 2>/dev/null || echo "$name")"; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 200; i++)); do
			gone "$pid" && break
			sleep 0.1
		done
		if ! gone "$pid"; then
			log "$name (pid $pid) did not stop on SIGTERM; killing it"
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.5
		fi
	fi
	rm -f "$pidf"
}

kubectl() { "$cdir/kubectl" --kubeconfig "$admin" "$@"; }

# The second node (NODES=2): node_boot, node_join, node_down.
. "$repo/hack/cluster-node.sh"

up() {
	[ "$(id -u)" = 0 ] || die "needs root"
	set_cri "${CLUSTER_CRI:-minicri}"
	if [ -e "$state" ] || [ -e /etc/kubernetes ] || [ -e /var/lib/kubelet ] || [ -S "$socket" ]; then
		die "a cluster (or another kubelet or minicri) is already here: hack/cluster.sh down first"
	fi
	for b in minicri minicri-conmon minicri-pause; do
		[ -x "$bin/$b" ] || die "no $bin/$b: make build first"
	done
	local conformance=
	if [ "$cri_name" = containerd ]; then
		[ "${NODES:-1}" = 1 ] || die "CLUSTER_CRI=containerd: one node only (the guest of NODES=2 runs minicri)"
		[ -x /usr/bin/containerd ] || die "no /usr/bin/containerd: hack/install-deps.sh containerd"
		# containerd runs a pause image as each pod's infra container;
		# the suite's (agnhost's pause) is in the conformance layout.
		conformance=$("$repo/hack/build-conformance.sh" --path)
		[ -x "$conformance" ] || die "no $conformance: make conformance-build first"
	fi
	"$repo/hack/build-kubelet.sh" >/dev/null
	"$repo/hack/build-cluster.sh" "$bin/minicri-pause" >/dev/null
	kubelet=$("$repo/hack/build-kubelet.sh" --path)
	cdir=$(dirname "$("$repo/hack/build-cluster.sh" --path)")
	. "$cdir/images.env"
	local t0=$SECONDS
	mkdir -p "$state"
	echo "$cdir" >"$state/cluster-dir"
	echo "$cri_name" >"$state/cri"
	for p in "${host_paths[@]}"; do [ -e "$p" ] || echo "$p"; done >"$state/new-paths"
	for s in "${sysctls[@]}"; do echo "$s=$(cat "/proc/sys/$s")"; done >"$state/sysctls"
	echo 1 >/proc/sys/net/ipv4/ip_forward
	iptables -N "$svc_chain"
	iptables -A "$svc_chain" -d "$service_subnet" -j REJECT
	iptables -I FORWARD 1 -j "$svc_chain"
	iptables -I OUTPUT 1 -j "$svc_chain"

	# The registry: Debian's docker-registry on a free loopback port, its
	# storage in STATE, the images pushed from the layout.
	local port
	port=$(comm -23 <(seq 5100 5199) <(ss -Htln | awk '{ n = split($4, a, ":"); print a[n] }' | sort -u) | head -1)
	[ -n "$port" ] || die "no free port in 5100-5199 for the registry"
	registry=127.0.0.1:$port
	cat >"$state/registry.yml" <<-EOF
	version: 0.1
	log: { level: warn, accesslog: { disabled: true } }
	storage: { filesystem: { rootdirectory: $state/registry }, delete: { enabled: true } }
	http: { addr: $registry }
	EOF
	echo /usr/bin/docker-registry >"$state/registry.cmd"
	start registry /usr/bin/docker-registry serve "$state/registry.yml"
	wait_for 15 "the registry on $registry" curl -sf "http://$registry/v2/"
	"$cdir/images" push "$cdir/oci" "$registry"
	[ -z "$conformance" ] || "$cdir/images" push "$(dirname "$conformance")/oci" "$registry"
	log "images pushed to $registry"
	node_boot

	# minicri, on the default socket, with a network config of its own: the
	# template the pod CIDR fills in, in a conf dir of its own (minicri
	# writes it only where no other network config is).
	mkdir -p "$state/net.d"
	cat >"$state/cni.template" <<-EOF
	{
	  "cniVersion": "1.0.0",
	  "name": "minicri-k8s",
	  "plugins": [
	    {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": true, "hairpinMode": true,
	     "ipam": {"type": "host-local", "dataDir": "$state/ipam",
	              "ranges": [{{range \$i, \$r := .PodCIDRRanges}}{{if \$i}}, {{end}}[{"subnet": "{{\$r}}"}]{{end}}],
	              "routes": [{{range \$i, \$r := .Routes}}{{if \$i}}, {{end}}{"dst": "{{\$r}}"}{{end}}]}},
	    {"type": "portmap", "capabilities": {"portMappings": true}},
	    {"type": "loopback"}
	  ]
	}
	EOF
	if [ "$cri_name" = containerd ]; then
		start_containerd "$(dirname "$conformance")"
	else
		# Its state root and run dir are the cluster's own, so that the
		# e2e suite's or a developer's daemon on this host is never touched.
		cat >"$state/minicri.toml" <<-EOF
		listen = "$socket"
		root = "$state/minicri"
		run_dir = "/run/minicri-cluster"
		cgroup_driver = "cgroupfs"
		[cni]
		conf_dir = "$state/net.d"
		conf_template = "$state/cni.template"
		EOF
		echo "$bin/minicri" >"$state/minicri.cmd"
		start minicri env PATH="$bin:$PATH" "$bin/minicri" --config "$state/minicri.toml"
	fi
	wait_for 30 "$cri_name's socket $socket" test -S "$socket"

	# The kubelet's root dir is a shared mount, so that what the kubelet
	# mounts there in its own mount namespace (see below) reaches minicri's.
	mkdir -p /var/lib/kubelet
	mount --bind /var/lib/kubelet /var/lib/kubelet
	mount --make-shared /var/lib/kubelet
	write_kubeadm_config
	log "kubeadm init (registry $registry, pods $pod_subnet, services $service_subnet)"
	echo "$cdir/kubeadm" >"$state/kubeadm.cmd"
	# kubeadm's preflight asks the kubelet on its PATH for its version.
	start kubeadm env PATH="$(dirname "$kubelet"):$PATH" "$cdir/kubeadm" init --config "$state/kubeadm.yaml" --skip-phases=addon/coredns --v=1
	# No systemd on this host: kubeadm writes the kubelet's configuration and
	# warns that it cannot start the service; the kubelet starts here instead.
	wait_for 120 "kubeadm to write the kubelet's configuration" \
		test -s /var/lib/kubelet/config.yaml -a -s /var/lib/kubelet/kubeadm-flags.env \
		|| { tail -30 "$state/kubeadm.log" >&2; exit 1; }
	start_kubelet
	local pid
	pid=$(cat "$state/kubeadm.pid")
	wait_for 600 "kubeadm init" gone "$pid" || { tail -30 "$state/kubeadm.log" >&2; exit 1; }
	grep -q 'Your Kubernetes control-plane has initialized successfully' "$state/kubeadm.log" \
		|| { tail -40 "$state/kubeadm.log" >&2; die "kubeadm init failed (log: $state/kubeadm.log)"; }
	rm -f "$state/kubeadm.pid"

	# CoreDNS as kubeadm makes it, but without the forward to the host's
	# upstream server: this host is offline, and the pods may reach no
	# address but the cluster's.
	"$cdir/kubeadm" init phase addon coredns --config "$state/kubeadm.yaml" --print-manifest \
		| sed '/^ *forward \. \/etc\/resolv\.conf/,/^ *}/d' >"$state/coredns.yaml"
	kubectl apply -f "$state/coredns.yaml" >/dev/null
	# A single node: the control plane's node runs the workloads too.
	kubectl taint nodes --all node-role.kubernetes.io/control-plane:NoSchedule- >/dev/null 2>&1 || true

	wait_for 180 "the node to be Ready" \
		sh -c "'$cdir/kubectl' --kubeconfig $admin get nodes -o jsonpath='{.items[*].status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
	local c
	for c in etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy coredns; do
		wait_for 300 "$c to be Running" sh -c "'$cdir/kubectl' --kubeconfig $admin -n kube-system get pods -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.status.containerStatuses[*].ready}{\"\\n\"}{end}' | grep -E '^$c-[^ ]* Running true( true)*\$'" \
			|| { kubectl -n kube-system get pods -o wide >&2; exit 1; }
	done
	cat >"$state/env" <<-EOF
	KUBECONFIG=$admin
	KUBECTL=$cdir/kubectl
	REGISTRY=$registry
	POD_SUBNET=$pod_subnet
	SERVICE_SUBNET=$service_subnet
	CRI_ENDPOINT=$cri
	CRI=$cri_name
	EOF
	node_join
	log "up in $((SECONDS - t0))s: KUBECONFIG=$admin $cdir/kubectl get pods -A"
	kubectl get pods -A -o wide >&2
}

write_kubeadm_config() {
	local ip
	ip=$(ip -4 route get 1.0.0.0 | sed -n 's/.* src \([0-9.]*\).*/\1/p')
	cat >"$state/kubeadm.yaml" <<-EOF
	apiVersion: kubeadm.k8s.io/v1beta4
	kind: InitConfiguration
	localAPIEndpoint:
	  advertiseAddress: $ip
	nodeRegistration:
	  criSocket: $cri
	  # This host: cgroup v1, which SystemVerification refuses for a kubelet
	  # of 1.35 or newer; the kubelet runs with failCgroupV1: false.
	  ignorePreflightErrors:
	  - SystemVerification
	---
	apiVersion: kubeadm.k8s.io/v1beta4
	kind: ClusterConfiguration
	kubernetesVersion: $KUBERNETES_VERSION
	imageRepository: $registry
	networking:
	  podSubnet: $pod_subnet
	  serviceSubnet: $service_subnet
	etcd:
	  local:
	    imageTag: $ETCD_TAG
	dns:
	  imageTag: $COREDNS_TAG
	---
	apiVersion: kubelet.config.k8s.io/v1beta1
	kind: KubeletConfiguration
	# This host: cgroup v1 and no systemd.
	cgroupDriver: cgroupfs
	failCgroupV1: false
	failSwapOn: false
	# The cluster's tests (test/e2e/cluster_kubelet_test.go) see what only a
	# node under load asks of the runtime: pulls side by side, and a chatty
	# pod's log rotated (renamed, then ReopenContainerLog) within seconds
	# rather than at the kubelet's 10Mi, checked every 10 s.
	serializeImagePulls: false
	maxParallelImagePulls: 3
	containerLogMaxSize: 1Mi
	containerLogMaxFiles: 3
	containerLogMonitorInterval: 3s
	---
	apiVersion: kubeproxy.config.k8s.io/v1alpha1
	kind: KubeProxyConfiguration
	mode: iptables
	# This host is shared: kube-proxy leaves the conntrack table's size and
	# timeouts, and route_localnet (NodePorts on 127.0.0.1), as they are.
	conntrack:
	  maxPerCore: 0
	  tcpEstablishedTimeout: 0s
	  tcpCloseWaitTimeout: 0s
	iptables:
	  localhostNodePorts: false
	EOF
}

# start_containerd CONFORMANCE_DIR: Debian's containerd 1.6 in minicri's
# place (CLUSTER_CRI=containerd), configured as minicri is for the cluster:
# the cgroupfs driver, the same CNI plugins, conf dir and template (the pod
# CIDR the kubelet sends fills it in, containerd's conf_template), the
# registry over plain HTTP through a hosts.toml of its own, a socket, root
# and state dir of its own. It runs the runc minicri runs by default, so
# that the two clusters differ by the CRI only; and, as each pod's infra
# container (minicri needs none), the conformance suite's pause image.
start_containerd() {
	local c=$state/containerd runc pause
	runc=$("$repo/hack/build-runc.sh" --path)
	[ -x "$runc" ] || runc=$(command -v runc) || die "no runc: make deps"
	pause=$(jq -r '.manifests[].annotations["org.opencontainers.image.ref.name"] // empty
		| select(startswith("conformance/pause:"))' "$1/oci/index.json" | head -1)
	[ -n "$pause" ] || die "no conformance/pause image in $1/oci"
	# The network namespaces containerd makes go to /run/netns, which is
	# not the cluster's: down checks the ones made after this list.
	find /run/netns -maxdepth 1 -name 'cni-*' 2>/dev/null | sort >"$state/netns-before" || true
	mkdir -p "$c/certs.d/$registry"
	cat >"$c/certs.d/$registry/hosts.toml" <<-EOF
	server = "http://$registry"
	[host."http://$registry"]
	  capabilities = ["pull", "resolve"]
	EOF
	cat >"$c/config.toml" <<-EOF
	version = 2
	root = "$c/root"
	state = "$c/state"
	# The snapshotters this host cannot run (overlayfs is the one used).
	disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
	  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
	[grpc]
	  address = "$socket"
	[plugins."io.containerd.internal.v1.opt"]
	  path = "$c/opt"
	[plugins."io.containerd.grpc.v1.cri"]
	  sandbox_image = "$registry/$pause"
	  # This host: no CAP_SYS_RESOURCE, so the kernel refuses an
	  # oom_score_adj below containerd's own (the kubelet asks -997 for the
	  # control plane's pods); raised to it, as minicri does.
	  restrict_oom_score_adj = true
	  [plugins."io.containerd.grpc.v1.cri".containerd]
	    default_runtime_name = "runc"
	    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
	      runtime_type = "io.containerd.runc.v2"
	      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
	        BinaryName = "$runc"
	        Root = "$c/runc"
	        SystemdCgroup = false
	  [plugins."io.containerd.grpc.v1.cri".cni]
	    bin_dir = "/usr/lib/cni"
	    conf_dir = "$state/net.d"
	    conf_template = "$state/cni.template"
	  [plugins."io.containerd.grpc.v1.cri".registry]
	    config_path = "$c/certs.d"
	EOF
	echo /usr/bin/containerd >"$state/containerd.cmd"
	log "containerd $(/usr/bin/containerd --version | awk '{ print $3 }') with $runc ($("$runc" --version | head -1))"
	start containerd /usr/bin/containerd --config "$c/config.toml"
}

# containerd_leftovers: after containerd stopped, the shims of the cluster's
# containerd still running (a pod kubeadm reset did not remove) are killed,
# and the network namespaces it made in /run/netns are removed; each is named
# on stdout.
containerd_leftovers() {
	local p n
	for p in /proc/[0-9]*; do
		tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- " -address $socket " || continue
		echo "containerd shim ${p#/proc/} (killed)"
		kill -KILL "${p#/proc/}" 2>/dev/null || true
	done
	[ -f "$state/netns-before" ] || return 0
	for n in $(find /run/netns -maxdepth 1 -name 'cni-*' 2>/dev/null | sort | comm -13 "$state/netns-before" -); do
		echo "network namespace $n (removed)"
		umount "$n" 2>/dev/null || true
		rm -f "$n"
	done
}

# start_kubelet runs the kubelet as kubeadm's systemd drop-in would, in a
# mount namespace of its own where files holding the values it wants cover
# the kernel settings it would otherwise change on the host.
start_kubelet() {
	local KUBELET_KUBEADM_ARGS="" t
	. /var/lib/kubelet/kubeadm-flags.env
	mkdir -p "$state/tunables"
	for t in "${tunables[@]}"; do echo "${t#*=}" >"$state/tunables/$(echo "${t%%=*}" | tr / .)"; done
	echo "$kubelet" >"$state/kubelet.cmd"
	# shellcheck disable=SC2086 # the flags are words, as systemd splits them
	start kubelet unshare --mount --propagation unchanged -- sh -c '
		set -e
		mount --make-rprivate /proc
		for f in "$0"/*; do mount --bind "$f" "/proc/sys/$(basename "$f" | tr . /)"; done
		exec "$@"' "$state/tunables" \
		"$kubelet" --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
		--kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml \
		$KUBELET_KUBEADM_ARGS
}

down() {
	[ "$(id -u)" = 0 ] || die "needs root"
	local t0=$SECONDS cdir
	set_cri "$(cat "$state/cri" 2>/dev/null || echo "${CLUSTER_CRI:-minicri}")"
	cdir=$(cat "$state/cluster-dir" 2>/dev/null || dirname "$("$repo/hack/build-cluster.sh" --path)")
	node_down
	stop kubeadm
	# The kubelet first: running, it would start the static pods again
	# while kubeadm reset removes them.
	stop kubelet
	if [ -x "$cdir/kubeadm" ] && [ -S "$socket" ]; then
		"$cdir/kubeadm" reset -f --cri-socket "$cri" >"$state/reset.log" 2>&1 \
			|| { tail -20 "$state/reset.log" >&2; log "kubeadm reset failed; cleaning up by hand"; }
	fi
	# What kube-proxy made: its iptables chains (and the nftables tables or
	# IPVS services of its other modes).
	[ -x "$cdir/kube-proxy" ] && "$cdir/kube-proxy" --cleanup >"$state/proxy-cleanup.log" 2>&1 || true
	local left=() l
	stop minicri
	stop containerd
	rm -f "$socket"
	if [ "$cri_name" = containerd ]; then
		while IFS= read -r l; do left+=("$l"); done < <(containerd_leftovers)
	fi
	stop registry
	# kubeadm reset unmounts what is under the kubelet's root dir, not the
	# root dir itself.
	while mountpoint -q /var/lib/kubelet 2>/dev/null; do umount /var/lib/kubelet; done
	rm -rf /etc/kubernetes /var/lib/kubelet /var/lib/etcd
	ip link del "$bridge" 2>/dev/null || true
	remove_kube_chains
	local b
	for b in FORWARD OUTPUT; do
		while iptables -D "$b" -j "$svc_chain" 2>/dev/null; do :; done
	done
	iptables -F "$svc_chain" 2>/dev/null || true
	iptables -X "$svc_chain" 2>/dev/null || true
	remove_kubepods_cgroups
	if [ -f "$state/sysctls" ]; then
		while IFS== read -r k v; do echo "$v" >"/proc/sys/$k"; done <"$state/sysctls"
	fi
	# minicri's (or containerd's) state: its pods are gone with kubeadm
	# reset; what is left is images and records.
	if grep -qE " ($state|/run/minicri-cluster)[/ ]" /proc/self/mountinfo; then
		left+=("mounts under $cri_name's dirs: $(grep -oE " ($state|/run/minicri-cluster)[^ ]*" /proc/self/mountinfo | tr '\n' ' ')")
	elif [ -f "$state/new-paths" ]; then
		xargs -r rm -rf <"$state/new-paths"
	fi
	local new_paths
	new_paths=$(cat "$state/new-paths" 2>/dev/null || true)
	[ ${#left[@]} -gt 0 ] || rm -rf "$state"
	# Check that nothing is left.
	grep -q ' /var/lib/kubelet' /proc/self/mountinfo && left+=("mounts under /var/lib/kubelet")
	local chains
	chains=$(for c in iptables ip6tables; do for tb in filter nat mangle; do "$c" -t "$tb" -S 2>/dev/null | sed -n "s/^-N \(KUBE-.*\)/$c $tb \1/p"; done; done)
	[ -z "$chains" ] || left+=("iptables chains: $chains")
	! iptables -S "$svc_chain" >/dev/null 2>&1 || left+=("iptables chain $svc_chain")
	local cg
	cg=$(kubepods_cgroups)
	[ -z "$cg" ] || left+=("cgroups: $cg")
	local p
	for p in /etc/kubernetes /var/lib/kubelet /var/lib/etcd $new_paths "$state" /sys/class/net/$bridge; do
		[ ! -e "$p" ] || left+=("$p")
	done
	if [ ${#left[@]} -gt 0 ]; then
		printf 'cluster: left after down: %s\n' "${left[@]}" >&2
		exit 1
	fi
	log "down in $((SECONDS - t0))s; nothing left"
}

# remove_kube_chains removes the iptables chains named KUBE-* (the kubelet's
# canaries and whatever kube-proxy --cleanup left) and the rules that jump to them.
remove_kube_chains() {
	local c tb rule chain
	for c in iptables ip6tables; do
		for tb in filter nat mangle; do
			"$c" -t "$tb" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' | grep -vE '^-A KUBE-' | while read -r rule; do
				eval "$c -t $tb ${rule/-A/-D}" || true
			done || true
			for chain in $("$c" -t "$tb" -S 2>/dev/null | sed -n 's/^-N \(KUBE-[^ ]*\)$/\1/p'); do
				"$c" -t "$tb" -F "$chain" || true
			done
			for chain in $("$c" -t "$tb" -S 2>/dev/null | sed -n 's/^-N \(KUBE-[^ ]*\)$/\1/p'); do
				"$c" -t "$tb" -X "$chain" || true
			done
		done
	done
}

# kubepods_cgroups lists the kubelet's cgroup trees (cgroupRoot /, cgroupsPerQOS).
kubepods_cgroups() {
	awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts | while read -r h; do
		[ -d "$h/kubepods" ] && echo "$h/kubepods"
	done
	return 0
}

remove_kubepods_cgroups() {
	local d
	for d in $(kubepods_cgroups); do
		find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
}

case "${1:-}" in
up) up ;;
down) down ;;
*) die "usage: hack/cluster.sh up|down" ;;
esac
