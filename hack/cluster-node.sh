# Sourced by hack/cluster.sh: the second node of `make cluster NODES=2`
# (docs/cluster.md), the production-shaped guest of the guest stage (Debian
# 12, systemd as PID 1, cgroup v2, AppArmor; hack/build-guest.sh) joined to
# the host's control plane with kubeadm join.
#
#   node_boot   (up, once the registry is up) the node network, then the
#               guest's boot and node_install in the background, while
#               kubeadm init runs
#   node_install the guest's card on the node network; minicri, the kubelet
#               and kubeadm installed in the guest as an operator would
#   node_join   (up, once the control plane is up) waits for node_install;
#               kubeadm join, the routes between the nodes' pod CIDRs, the
#               node cordoned
#   node_down   (down, first) the guest, the node network and its rules; it
#               checks that none of them is left
#
# The node network is a bridge of its own (10.252.0.0/24: beside the pods'
# 10.250/16, the services' 10.251/16 and the e2e suite's bridges
# 10.200-249.x.0/24), the host 10.252.0.1, the guest 10.252.0.2 on a tap.
# The guest boots as in the guest stage, on qemu's user-mode network alone
# (restricted: no route out; ssh through a port of 127.0.0.1): its image
# gives every card it finds at boot that network's address. Its card on the
# tap is plugged in once the guest knows what address that card takes. The
# guest routes to the host's address and pods through the tap, and nothing
# else: the host forwards between the bridge and its pods only.
#
# It uses hack/cluster.sh's state, repo, bin, cdir, registry, admin,
# bridge (the host's pod bridge) and pod_subnet, and its log, die, wait_for, start, stop,
# gone and kubectl.

node_bridge=minicri-nodes
node_tap=minicri-tap1
node_host_ip=10.252.0.1
node_guest_ip=10.252.0.2
node_prefix=24
node_name=minicri-guest
# The guest's two network cards: the user-mode one (ssh) and the tap.
node_mac_user=52:54:00:fa:02:01
node_mac_tap=52:54:00:fa:02:02
# kube-proxy's masquerade mark (masqueradeBit 14, its default): packets it
# marked must still be masqueraded (a pod reaching itself through a service).
node_masq_mark=0x4000/0x4000
# The iptables chains node_boot adds, each jumped to from the first rule of
# a built-in chain: TABLE CHAIN BUILTIN.
node_chains=("filter MINICRI-NODES-FWD FORWARD" "filter MINICRI-NODES-IN INPUT" "nat MINICRI-NODES-NAT POSTROUTING")

# node_ssh SCRIPT: runs SCRIPT (bash, as root) in the guest.
node_ssh() {
	local nstate=$state/node2
	ssh -i "$nstate/id_ed25519" -p "$(cat "$nstate/ssh-port")" -o IdentitiesOnly=yes -o BatchMode=yes \
		-o LogLevel=ERROR -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
		-o ControlMaster=auto -o ControlPath="$nstate/ssh.ctl" -o ControlPersist=yes \
		-o ConnectTimeout=20 -o ServerAliveInterval=10 -o ServerAliveCountMax=6 \
		root@127.0.0.1 -- bash -c "$(printf '%q' "$1")"
}

node_boot() {
	local nodes=${NODES:-1}
	[ "$nodes" = 1 ] && return 0
	[ "$nodes" = 2 ] || die "NODES=$nodes: 1 or 2 (the host, and the guest)"
	local nstate=$state/node2 art port
	for tool in qemu-system-x86_64 qemu-img ssh; do
		command -v "$tool" >/dev/null || die "$tool is missing: hack/install-deps.sh guest"
	done
	[ ! -e "/sys/class/net/$node_bridge" ] || die "$node_bridge exists: hack/cluster.sh down first"
	art=$("$repo/hack/build-guest.sh")
	mkdir -p "$nstate/share"
	echo "$art" >"$nstate/guest-dir"

	# The node network. Forwarded: pod to pod between the host's pod bridge
	# and this one, both ways; nothing else from or to the bridge (the
	# guest's default route is the host: this keeps it on the machine, and
	# no other machine reaches into it through the host). The pods reach
	# each other unmasqueraded (the Kubernetes network model), except what
	# kube-proxy marked.
	ip link add "$node_bridge" type bridge
	ip addr add "$node_host_ip/$node_prefix" dev "$node_bridge"
	ip link set "$node_bridge" up
	ip tuntap add dev "$node_tap" mode tap
	ip link set "$node_tap" master "$node_bridge" up
	local c t chain builtin
	for c in "${node_chains[@]}"; do
		read -r t chain builtin <<<"$c"
		iptables -t "$t" -N "$chain"
		iptables -t "$t" -I "$builtin" 1 -j "$chain"
	done
	iptables -A MINICRI-NODES-FWD -i "$node_bridge" -o "$bridge" -s "$pod_subnet" -d "$pod_subnet" -j RETURN
	iptables -A MINICRI-NODES-FWD -i "$bridge" -o "$node_bridge" -s "$pod_subnet" -d "$pod_subnet" -j RETURN
	iptables -A MINICRI-NODES-FWD -i "$node_bridge" -j DROP
	iptables -A MINICRI-NODES-FWD -o "$node_bridge" -j DROP
	iptables -t nat -A MINICRI-NODES-NAT -m mark --mark "$node_masq_mark" -j RETURN
	iptables -t nat -A MINICRI-NODES-NAT -s "$pod_subnet" -d "$pod_subnet" -j ACCEPT

	# The guest pulls from the cluster's registry through a second instance
	# on the bridge address: read-only, on the same storage, reachable from
	# the host itself and from the guest's own address only (not from a pod
	# of either node, nor from another machine that routes to this one).
	port=${registry##*:}
	iptables -A MINICRI-NODES-IN -d "$node_host_ip" -p tcp --dport "$port" -i lo -j RETURN
	iptables -A MINICRI-NODES-IN -d "$node_host_ip" -p tcp --dport "$port" -i "$node_bridge" -s "$node_guest_ip" -j RETURN
	iptables -A MINICRI-NODES-IN -d "$node_host_ip" -p tcp --dport "$port" -j DROP
	cat >"$state/node-registry.yml" <<-EOF
	version: 0.1
	log: { level: warn, accesslog: { disabled: true } }
	storage:
	  filesystem: { rootdirectory: $state/registry }
	  maintenance: { readonly: { enabled: true }, uploadpurging: { enabled: false } }
	http: { addr: $node_host_ip:$port }
	EOF
	echo "$state/node-registry.yml" >"$state/node-registry.cmd"
	start node-registry /usr/bin/docker-registry serve "$state/node-registry.yml"
	wait_for 15 "the node registry on $node_host_ip:$port" curl -sf "http://$node_host_ip:$port/v2/"

	# The guest, as the guest stage boots it (a throwaway overlay of the
	# cached disk, the 9p share), with a slot for its card on the tap and
	# qemu's monitor on a pair of fifos (node_join plugs the card). systemd
	# waits longer for units and devices than its default: a TCG guest
	# beside a cluster's start on a busy host can take minutes to boot,
	# and a unit timed out (systemd-networkd) leaves the guest unreachable.
	install -m 0600 "$art/id_ed25519" "$nstate/id_ed25519"
	qemu-img create -q -f qcow2 -F raw -b "$art/rootfs.img" "$nstate/disk.qcow2"
	port=$(comm -23 <(seq 5200 5299) <(ss -Htln | awk '{ n = split($4, a, ":"); print a[n] }' | sort -u) | head -1)
	[ -n "$port" ] || die "no free port in 5200-5299 for the guest's ssh"
	echo "$port" >"$nstate/ssh-port"
	local accel=(-accel tcg,thread=multi,tb-size=256 -cpu max)
	grep -qwE 'vmx|svm' /proc/cpuinfo && [ -e /dev/kvm ] && accel=(-accel kvm -cpu host)
	mkfifo "$nstate/monitor.in" "$nstate/monitor.out"
	echo "-name minicri-cluster-node2" >"$state/node2-qemu.cmd"
	start node2-qemu qemu-system-x86_64 "${accel[@]}" \
		-name minicri-cluster-node2 -machine q35 -smp 2 -m 2560 \
		-nodefaults -no-user-config -display none \
		-kernel "$art/vmlinuz" -initrd "$art/initrd.img" \
		-append "root=/dev/vda rw console=ttyS0 quiet systemd.unified_cgroup_hierarchy=1 panic=-1 systemd.default_timeout_start_sec=600" -no-reboot \
		-drive "file=$nstate/disk.qcow2,if=virtio,format=qcow2,cache=unsafe,discard=unmap" \
		-netdev "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:$port-:22" -device "virtio-net-pci,netdev=n0,mac=$node_mac_user" \
		-netdev "tap,id=n1,ifname=$node_tap,script=no,downscript=no" -device pcie-root-port,id=node-port,chassis=1 \
		-chardev "pipe,id=mon,path=$nstate/monitor" -mon chardev=mon,mode=readline \
		-virtfs "local,path=$nstate/share,mount_tag=host,security_model=passthrough,id=host" \
		-device virtio-rng-pci -serial "file:$nstate/serial.log"
	log "guest booting (ssh on 127.0.0.1:$port, serial console $nstate/serial.log)"
	# A failed up leaves it to down, which stops it by its pid.
	node_install >"$nstate/install.log" 2>&1 &
	node_install_pid=$!
	echo "$node_install_pid" >"$state/node-install.pid"
	echo "cluster.sh up" >"$state/node-install.cmd"
}

node_install() {
	local nstate=$state/node2
	[ -d "$nstate" ] || return 0
	local t0=$SECONDS api registry_port=${registry##*:}
	node_fill_share
	# The API server's address (kubeadm's advertiseAddress).
	api=$(ip -4 route get 1.0.0.0 | sed -n 's/.* src \([0-9.]*\).*/\1/p')
	wait_for 900 "ssh to the guest" node_ssh true \
		|| { tail -30 "$nstate/serial.log" >&2; die "the guest did not come up"; }
	log "guest up after $((SECONDS - t0))s; installing minicri, the kubelet and kubeadm"
	# The card on the tap: its address, and a route to the API server
	# through the host (the pods' routes follow the join). The user-mode
	# card keeps its default route, which leads nowhere (restricted).
	node_ssh "cat >/etc/systemd/network/05-minicri-node.network <<EOF
[Match]
MACAddress=$node_mac_tap
[Network]
Address=$node_guest_ip/$node_prefix
[Route]
Destination=$api/32
Gateway=$node_host_ip
EOF
		networkctl reload"
	echo "device_add virtio-net-pci,netdev=n1,mac=$node_mac_tap,bus=node-port,id=node-nic" >"$nstate/monitor.in"
	wait_for 120 "the guest to reach the node registry over $node_bridge" \
		node_ssh "curl -sf http://$node_host_ip:$registry_port/v2/"

	# As an operator installs a node (docs/cluster.md): make install's files
	# and config, runc, the kubelet and kubeadm with kubeadm's drop-in, a CNI
	# template, and the cluster's registry reached through its mirror.
	node_ssh "set -e
		cp -a /mnt/host/install/. /
		install -D -m 0755 /mnt/host/runc /usr/local/lib/minicri/runc-v1.5.2/runc
		install -D -m 0755 /mnt/host/runc /usr/local/sbin/runc
		install -m 0755 /mnt/host/kubelet /mnt/host/kubeadm /usr/local/bin/
		install -D -m 0644 /mnt/host/kubelet.service /etc/systemd/system/kubelet.service
		install -D -m 0644 /mnt/host/10-kubeadm.conf /etc/systemd/system/kubelet.service.d/10-kubeadm.conf
		install -D -m 0644 /mnt/host/cni.template /etc/minicri/cni.template
		sed -i 's#^conf_template = .*#conf_template = \"/etc/minicri/cni.template\"#' /etc/minicri/minicri.toml
		install -D -m 0644 /mnt/host/hosts.toml /etc/minicri/certs.d/127.0.0.1:$registry_port/hosts.toml
		systemctl daemon-reload
		systemctl enable --now minicri.service
		systemctl enable kubelet.service 2>/dev/null" \
		|| die "installing the guest failed"
	log "guest installed in $((SECONDS - t0))s"
}

node_join() {
	local nstate=$state/node2
	[ -d "$nstate" ] || return 0
	local t0=$SECONDS join endpoint token hash host_cidr guest_cidr registry_port=${registry##*:}
	wait "$node_install_pid" || { cat "$nstate/install.log" >&2; die "the guest was not installed"; }
	rm -f "$state/node-install.pid"
	cat "$nstate/install.log" >&2
	join=$("$cdir/kubeadm" token create --print-join-command --ttl 30m --kubeconfig "$admin")
	read -r endpoint token hash <<<"$(echo "$join" | sed -n 's/.*join \([^ ]*\) --token \([^ ]*\) --discovery-token-ca-cert-hash \([^ ]*\).*/\1 \2 \3/p')"
	[ -n "$hash" ] || die "kubeadm token create printed no join command: $join"

	# kubeadm join; the node's address is the tap's (the kubelet would take
	# the user-mode card's, of the default route, otherwise).
	cat >"$nstate/share/join.yaml" <<-EOF
	apiVersion: kubeadm.k8s.io/v1beta4
	kind: JoinConfiguration
	discovery:
	  bootstrapToken:
	    apiServerEndpoint: $endpoint
	    token: $token
	    caCertHashes: [$hash]
	nodeRegistration:
	  name: $node_name
	  criSocket: unix:///run/minicri/minicri.sock
	  kubeletExtraArgs:
	  - {name: node-ip, value: $node_guest_ip}
	# A TCG guest on a busy host: the kubelet's start and TLS bootstrap
	# can take minutes.
	timeouts:
	  discovery: 10m0s
	  tlsBootstrap: 15m0s
	  kubeletHealthCheck: 15m0s
	EOF
	log "kubeadm join $endpoint (node $node_name, $node_guest_ip)"
	# The preflight checks first, again while they fail: under TCG the
	# first CRI call of a cold kubeadm can outlast its deadline.
	wait_for 300 "kubeadm's preflight checks in the guest" \
		node_ssh "kubeadm join phase preflight --config /mnt/host/join.yaml >/var/log/kubeadm-preflight.log 2>&1" \
		|| { node_ssh "cat /var/log/kubeadm-preflight.log" >&2 || true; die "kubeadm join's preflight checks failed"; }
	node_ssh "kubeadm join --config /mnt/host/join.yaml --skip-phases=preflight --v=1 >/var/log/kubeadm-join.log 2>&1" \
		|| { node_ssh "tail -40 /var/log/kubeadm-join.log; journalctl -u kubelet --no-pager | tail -20" >&2 || true
			die "kubeadm join failed"; }
	# Kept out of the way of the cluster's workloads: a TCG guest is slow.
	# The multi-node tests place their pods on it by name.
	wait_for 60 "the node $node_name" kubectl get node "$node_name"
	kubectl cordon "$node_name" >/dev/null

	# The routes between the nodes' pod CIDRs, once the controller-manager
	# gave the guest its own.
	wait_for 120 "a pod CIDR for $node_name" sh -c "'$cdir/kubectl' --kubeconfig $admin get node $node_name -o jsonpath='{.spec.podCIDR}' | grep -q ."
	guest_cidr=$(kubectl get node "$node_name" -o jsonpath='{.spec.podCIDR}')
	host_cidr=$(kubectl get nodes -o jsonpath="{.items[?(@.metadata.name!=\"$node_name\")].spec.podCIDR}")
	ip route replace "$guest_cidr" via "$node_guest_ip" dev "$node_bridge"
	node_ssh "ip route replace $host_cidr via $node_host_ip"
	wait_for 600 "the node $node_name to be Ready" \
		sh -c "'$cdir/kubectl' --kubeconfig $admin get node $node_name -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True" \
		|| { node_ssh "journalctl -u kubelet --no-pager | tail -30" >&2 || true; exit 1; }
	wait_for 600 "kube-proxy on $node_name" \
		sh -c "'$cdir/kubectl' --kubeconfig $admin -n kube-system get pods -l k8s-app=kube-proxy --field-selector spec.nodeName=$node_name -o jsonpath='{.items[*].status.containerStatuses[*].ready}' | grep -qx true" \
		|| { kubectl -n kube-system describe pods -l k8s-app=kube-proxy >&2; exit 1; }
	cat >>"$state/env" <<-EOF
	NODE2=$node_name
	NODE2_IP=$node_guest_ip
	NODE2_POD_CIDR=$guest_cidr
	NODE_REGISTRY=$node_host_ip:$registry_port
	EOF
	log "node $node_name joined and Ready in $((SECONDS - t0))s (pods $guest_cidr; cordoned)"
}

# node_fill_share puts into the guest's share what node_join installs.
node_fill_share() {
	local share=$state/node2/share kdir registry_port=${registry##*:}
	make -s -C "$repo" install BIN="$bin" DESTDIR="$share/install" >/dev/null
	cp "$("$repo/hack/build-runc.sh" --path)" "$share/runc"
	cp "$("$repo/hack/build-kubelet.sh" --path)" "$share/kubelet"
	cp "$cdir/kubeadm" "$share/kubeadm"
	cp "$repo/contrib/kubelet/kubelet.service" "$repo/contrib/kubelet/10-kubeadm.conf" "$share/"
	# The same network as the host's, less its masquerade: the guest
	# routes nothing off the machine, and pods reach pods unmasqueraded.
	sed 's/"ipMasq": true/"ipMasq": false/; s#"dataDir": "[^"]*", *##' "$state/cni.template" >"$share/cni.template"
	cat >"$share/hosts.toml" <<-EOF
	server = "http://127.0.0.1:$registry_port"
	[host."http://$node_host_ip:$registry_port"]
	  capabilities = ["pull", "resolve"]
	EOF
}

node_down() {
	local nstate=$state/node2 left=() c t chain builtin
	[ -d "$nstate" ] || [ -e "/sys/class/net/$node_bridge" ] || [ -f "$state/node2-qemu.pid" ] || return 0
	# The guest is thrown away with its disk: no need to reset it first.
	if [ -S "$nstate/ssh.ctl" ]; then
		ssh -o ControlPath="$nstate/ssh.ctl" -O exit root@127.0.0.1 2>/dev/null || true
	fi
	stop node-install
	stop node2-qemu
	stop node-registry
	ip link del "$node_tap" 2>/dev/null || true
	ip link del "$node_bridge" 2>/dev/null || true
	for c in "${node_chains[@]}"; do
		read -r t chain builtin <<<"$c"
		while iptables -t "$t" -D "$builtin" -j "$chain" 2>/dev/null; do :; done
		iptables -t "$t" -F "$chain" 2>/dev/null || true
		iptables -t "$t" -X "$chain" 2>/dev/null || true
	done
	rm -rf "$nstate" "$state/node-registry.yml"
	for c in "${node_chains[@]}"; do
		read -r t chain builtin <<<"$c"
		! iptables -t "$t" -S "$chain" >/dev/null 2>&1 || left+=("iptables chain $t $chain")
	done
	[ ! -e "/sys/class/net/$node_tap" ] || left+=("$node_tap")
	[ ! -e "/sys/class/net/$node_bridge" ] || left+=("$node_bridge")
	! ip route | grep -q "$node_bridge" || left+=("routes via $node_bridge")
	[ ! -f "$state/node2-qemu.pid" ] || left+=("the guest's qemu ($(cat "$state/node2-qemu.pid"))")
	if [ ${#left[@]} -gt 0 ]; then
		printf 'cluster: left after down: %s\n' "${left[@]}" >&2
		exit 1
	fi
	log "node $node_name down: guest, $node_bridge, $node_tap, routes and rules gone"
}
