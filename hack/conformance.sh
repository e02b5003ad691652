#!/usr/bin/env bash
# Runs the Kubernetes conformance suite (e2e.test v1.37.2 of
# hack/build-conformance.sh) against the cluster hack/cluster.sh brought up
# (make conformance; docs/conformance.md).
#
#   hack/conformance.sh          every [Conformance] spec that is neither
#                                [Serial], [Disruptive] nor [Slow], in
#                                parallel; then the [Serial] ones, one at a time
#                                (CONFORMANCE_PHASES, default "parallel serial";
#                                "slow" adds the [Slow] ones, in parallel)
#   hack/conformance.sh FOCUS    only the [Conformance] specs whose name
#                                matches the regular expression FOCUS (the
#                                cluster stage of make test)
#   hack/conformance.sh leaks    the leak counts only (after cluster-down too)
#
# CONFORMANCE_SKIP is a regular expression of specs every phase leaves out
# besides those. The specs the suite's images cannot pass, and the one that
# needs two untainted nodes on a cluster with fewer, are left out too, and
# named in the summary as not run, with the reason; CONFORMANCE_NOT_RUN=0
# runs them all the same (the summary says so): the cross-check of each
# reason on the cluster of CLUSTER_CRI=containerd (docs/conformance.md).
# CONFORMANCE_SERIAL=1 hack/conformance.sh FOCUS runs the [Serial] specs
# FOCUS matches too, one at a time (the focused run leaves them out else).
#
# The suite's images go to the cluster's registry (STATE/env's REGISTRY)
# like the control plane's, and KUBE_TEST_REPO_LIST points every registry the
# suite names there. Each run keeps its log, ginkgo's JUnit and JSON reports,
# a summary (the counts: passed, failed, skipped; the wall time; the leak
# counts before and after) in a directory of its own under
# MINICRI_CONFORMANCE_STATE (default /var/lib/minicri-conformance, kept after
# cluster-down); "latest" links to the last one.
#
# CONFORMANCE_PROCS (default 4) is the number of parallel ginkgo processes:
# the specs mostly wait on the cluster, so more than the host's cores; the
# timeout of a whole phase is CONFORMANCE_TIMEOUT (default 90m).
set -euo pipefail
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
repo=$(cd "$(dirname "$0")/.." && pwd)
cluster_state=${MINICRI_CLUSTER_STATE:-/var/lib/minicri-cluster}
results=${MINICRI_CONFORMANCE_STATE:-/var/lib/minicri-conformance}
procs=${CONFORMANCE_PROCS:-4}
timeout=${CONFORMANCE_TIMEOUT:-90m}
phases=${CONFORMANCE_PHASES:-parallel serial}

log() { echo "conformance: $*" >&2; }
die() { log "$*"; exit 1; }

# leaks prints what pods leave on the host when they go, one count a line:
# the mounts under minicri's (or containerd's) and the kubelet's pod dirs,
# the pinned network namespaces, the pods' cgroups, the IPs the CNI's
# host-local IPAM holds, and the CRI's pod sandboxes. With the cluster up,
# the system pods account for some of each; after cluster-down every count is 0.
leaks() {
	local mi=/proc/self/mountinfo ipam="$cluster_state/ipam"
	local roots=" ($cluster_state/minicri|$cluster_state/containerd|/run/minicri-cluster|/var/lib/kubelet/pods)/"
	echo "mounts $(awk '{ print " " $5 "/" }' "$mi" | grep -cE "^$roots" || true)"
	echo "netns $(awk '$9 == "nsfs" && $5 ~ /\/net$/ { print " " $5 "/" }' "$mi" | grep -cE "^$roots" || true)"
	local h n=0
	h=$(awk '$3 == "cgroup" && $4 ~ /(^|,)memory(,|$)/ { print $2; exit }' /proc/self/mounts)
	[ -n "$h" ] || h=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
	[ -d "$h/kubepods" ] && n=$(find "$h/kubepods" -maxdepth 2 -type d -name 'pod*' | wc -l)
	echo "cgroups $n"
	echo "ips $(find "$ipam" -type f -name '[0-9]*.[0-9]*' 2>/dev/null | wc -l)"
	local crictl pods=0 endpoint
	crictl=$("$repo/hack/build-cri-tools.sh" --path 2>/dev/null | sed -n 's#/critest$#/crictl#p')
	endpoint=$(sed -n 's/^CRI_ENDPOINT=//p' "$cluster_state/env" 2>/dev/null || true)
	endpoint=${endpoint:-unix:///run/minicri/minicri.sock}
	if [ -S "${endpoint#unix://}" ] && [ -x "$crictl" ]; then
		pods=$("$crictl" --runtime-endpoint "$endpoint" pods -q 2>/dev/null | wc -l)
	fi
	echo "pods $pods"
}

if [ "${1:-}" = leaks ]; then
	leaks
	exit 0
fi

[ "$(id -u)" = 0 ] || die "needs root (the leak counts read the host's mounts and cgroups)"
[ -f "$cluster_state/env" ] || die "no cluster up ($cluster_state/env): make cluster first"
# shellcheck disable=SC1091 # written by hack/cluster.sh up
. "$cluster_state/env"
e2e=$("$repo/hack/build-conformance.sh" | tail -1)
dir=$(dirname "$e2e")
"$dir/images" push "$dir/oci" "$REGISTRY"
log "the suite's images pushed to $REGISTRY"

run=$results/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$run"
ln -sfn "$run" "$results/latest"
# Every registry of test/utils/image/manifest.go but the two the suite keeps
# unreachable on purpose (invalidRegistry, privateRegistry: the specs that
# pull from them expect the pull to fail or to need a secret).
cat >"$run/repo-list.yaml" <<EOF
promoterE2eRegistry: $REGISTRY/e2e-test-images
buildImageRegistry: $REGISTRY/build-image
gcEtcdRegistry: $REGISTRY/conformance
gcRegistry: $REGISTRY/conformance
sigStorageRegistry: $REGISTRY/sig-storage
dockerLibraryRegistry: $REGISTRY/library
cloudProviderGcpRegistry: $REGISTRY/cloud-provider-gcp
EOF
export KUBE_TEST_REPO_LIST=$run/repo-list.yaml
leaks >"$run/leaks-before"

# not_run REGEX REASON: the specs matching REGEX are left out of every
# phase, and named in the summary with the reason.
skip_extra=${CONFORMANCE_SKIP:-}
: >"$run/summary"
not_run() {
	if [ "${CONFORMANCE_NOT_RUN:-}" = 0 ]; then
		echo "run all the same (CONFORMANCE_NOT_RUN=0): $1: $2" >>"$run/summary"
		return
	fi
	skip_extra="${skip_extra:+$skip_extra|}$1"
	echo "not run: $1: $2" >>"$run/summary"
}
# The specs no image made offline passes (docs/conformance.md): the
# Secret and ConfigMap ones that run "sh -c env" in busybox and look for
# a variable whose name is no shell name ("data-1"). Upstream's busybox ash
# passes such variables on; Debian's (bookworm's 1.35, trixie's 1.37) drops
# them, and a busybox image whose sh is bash (which passes them on) fails
# the specs that match busybox ash's own error messages.
not_run '\[sig-node\] (ConfigMap|Secrets) should be consumable (via the environment|as environment variable names)' \
	"Debian's busybox sh drops environment variables whose names are no shell names"
# A cluster with fewer than two nodes that take pods (one node, or the
# guest of NODES=2 kept cordoned) cannot run the specs that want two: the
# one that counts them, and the DaemonSet rollback (which checks that a
# pod on another node is not restarted).
untainted=$("$KUBECTL" --kubeconfig "$KUBECONFIG" get nodes -o json | jq '[.items[]
	| select((.spec.unschedulable // false) | not)
	| select([.spec.taints[]? | select(.effect != "PreferNoSchedule")] | length == 0)] | length')
if [ "$untainted" -lt 2 ]; then
	not_run 'should have at least two untainted nodes' "$untainted untainted node(s)"
	not_run 'Daemon set should rollback without unnecessary restarts' "$untainted schedulable node(s), the spec wants 2"
fi

# phase NAME PROCS FOCUS SKIP: one ginkgo run of the [Conformance] specs
# (the label the suite gives them) of e2e.test, its log and reports in
# RUN/NAME*; fails when a spec failed.
phase() {
	local name=$1 n=$2 focus=$3 skip="$4${skip_extra:+|$skip_extra}" t0=$SECONDS rc=0
	log "$name: $n process(es), focus '$focus', skip '$skip' (log $run/$name.log)"
	"$dir/ginkgo" --procs="$n" --label-filter=Conformance --focus="$focus" --skip="$skip" --timeout="$timeout" \
		--no-color --silence-skips --poll-progress-after=120s \
		--output-dir="$run" --junit-report="$name.xml" --json-report="$name.json" \
		"$e2e" -- --kubeconfig="$KUBECONFIG" --provider=skeleton \
		--disable-log-dump --report-dir="$run/$name" >"$run/$name.log" 2>&1 || rc=$?
	{ echo "$name $((SECONDS - t0))s"; summary "$run/$name.json"; } >>"$run/summary"
	return $rc
}

# summary FILE: the counts of ginkgo's JSON report, then a line for each
# spec that failed or skipped itself (a feature the cluster lacks); the specs
# the focus left out are not counted.
summary() {
	[ -f "$1" ] || { echo "no report"; return; }
	jq -r '[.[].SpecReports[] | select(.LeafNodeType == "It")
		| {name: ((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" ")), state: .State, msg: (.Failure.Message // "")}
		| select(.state != "skipped" or .msg != "")] as $s
		| ($s | map(select(.state == "passed")) | length) as $p
		| ($s | map(select(.state == "skipped")) | length) as $k
		| "passed \($p) failed \(($s | length) - $p - $k) skipped \($k)",
		  ($s[] | select(.state != "passed") | "  \(.state | ascii_upcase) \(.name): \(.msg | split("\n")[0])")' "$1"
}

t0=$SECONDS
rc=0
if [ $# -gt 0 ] && [ "${CONFORMANCE_SERIAL:-}" = 1 ]; then
	phase focused 1 "$1" '\[Disruptive\]|\[Slow\]' || rc=1
elif [ $# -gt 0 ]; then
	phase focused "$procs" "$1" '\[Serial\]|\[Disruptive\]|\[Slow\]' || rc=1
else
	if [[ " $phases " == *" parallel "* ]]; then
		phase parallel "$procs" '\[Conformance\]' '\[Serial\]|\[Disruptive\]|\[Slow\]' || rc=1
	fi
	if [[ " $phases " == *" serial "* ]]; then
		phase serial 1 '\[Serial\].*\[Conformance\]|\[Conformance\].*\[Serial\]' '\[Disruptive\]' || rc=1
	fi
	if [[ " $phases " == *" slow "* ]]; then
		phase slow "$procs" '\[Slow\].*\[Conformance\]|\[Conformance\].*\[Slow\]' '\[Serial\]|\[Disruptive\]' || rc=1
	fi
fi
echo "wall $((SECONDS - t0))s" >>"$run/summary"
# The suite deletes its namespaces as it goes; the leak counts wait for the
# last of them to go (bounded: a namespace stuck terminating is a finding).
for ((i = 0; i < 300; i++)); do
	"$KUBECTL" --kubeconfig "$KUBECONFIG" get ns --no-headers 2>/dev/null | grep -qvE '^(default|kube-system|kube-public|kube-node-lease) ' || break
	sleep 1
done
# The kubelet removes the sandboxes of deleted pods on its own schedule
# (a minute or so); count once they are back to the count before, or after
# three minutes (what is still there then is reported as left).
for ((i = 0; i < 180; i++)); do
	leaks >"$run/leaks-after"
	cmp -s "$run/leaks-before" "$run/leaks-after" && break
	sleep 1
done
{
	echo "leaks before: $(tr '\n' ' ' <"$run/leaks-before")"
	echo "leaks after:  $(tr '\n' ' ' <"$run/leaks-after")"
} >>"$run/summary"
cat "$run/summary" >&2
exit $rc
