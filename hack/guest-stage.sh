#!/usr/bin/env bash
# Runs the guest tests (test/e2e/guest_*_test.go, docs/development.md) on
# one or more Debian releases, each in a VM of its own booted from
# hack/build-guest.sh's cached image:
#
#   hack/guest-stage.sh RELEASE=RUN ...
#
# RUN is the go test -run pattern of that release's tests. The test binary
# is built once. One release: its tests' output as they run (make
# guest-test). Several (make guest-stage, the guest stage of make test):
# their VMs run side by side, each test binary's output goes to
# bin/guest/RELEASE.log, printed whole when all are done, and a summary
# follows: per release its boot, install, each test's outcome and time,
# and the stage's wall time. Under TCG most of a guest test is waiting on
# the guest, and each VM is CPU threads of its own: side by side, the
# releases overlap their waits and take a bigger share of a busy host than
# one after another. GUEST_SIDE_BY_SIDE=0 runs them one after another.
#
# Environment: MINICRI_BIN_DIR, MINICRI_KUBELET, MINICRI_CRITEST (passed to
# the tests, as make sets them), GUEST_TIMEOUT (each release's go test
# -timeout, default 20m), GUEST_LOG_DIR (default bin/guest), GO.
set -euo pipefail
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
cd "$(dirname "$0")/.."

if [ $# -eq 0 ]; then
	echo "usage: hack/guest-stage.sh RELEASE=RUN ..." >&2
	exit 2
fi
GO=${GO:-go}
timeout=${GUEST_TIMEOUT:-20m}
logs=${GUEST_LOG_DIR:-$PWD/bin/guest}
mkdir -p "$logs"

# Each release's image, one at a time: a cold build takes both cores for
# minutes (hack/build-guest.sh reuses a cached one at once).
releases=()
declare -A run dir
for spec in "$@"; do
	rel=${spec%%=*}
	if [ "$rel" = "$spec" ] || [ -z "$rel" ]; then
		echo "guest-stage: $spec: want RELEASE=RUN" >&2
		exit 2
	fi
	releases+=("$rel")
	run[$rel]=${spec#*=}
	dir[$rel]=$(hack/build-guest.sh "$rel")
done

bin="$logs/guest.test"
$GO test -c -tags e2e,guest -o "$bin" ./test/e2e/

# run_release runs one release's tests; the binary runs in the package's
# dir, as go test would run it.
run_release() {
	local rel=$1
	(cd test/e2e && MINICRI_GUEST_DIR="${dir[$rel]}" "$bin" -test.v -test.count=1 -test.parallel 8 \
		-test.timeout "$timeout" -test.run "${run[$rel]}")
}

if [ ${#releases[@]} -eq 1 ]; then
	run_release "${releases[0]}"
	exit
fi

# timed runs a release's tests into its log, and notes their exit code
# and end in RELEASE.end.
timed() {
	local rel=$1 code=0
	run_release "$rel" >"$logs/$rel.log" 2>&1 || code=$?
	echo "$code $(date +%s)" >"$logs/$rel.end"
}

start=$(date +%s)
pids=()
for rel in "${releases[@]}"; do
	rm -f "$logs/$rel.end"
	if [ "${GUEST_SIDE_BY_SIDE:-1}" = 0 ]; then
		timed "$rel"
	else
		timed "$rel" &
		pids+=($!)
	fi
done
for p in "${pids[@]}"; do
	wait "$p" || true
done
wall=$(($(date +%s) - start))

failed=0
for rel in "${releases[@]}"; do
	echo "=== guest stage: $rel (${run[$rel]}) ==="
	cat "$logs/$rel.log"
done
echo "=== guest stage summary: $(if [ "${GUEST_SIDE_BY_SIDE:-1}" = 0 ]; then echo one after another; else echo side by side; fi), ${wall} s in all ==="
prev=$start
for rel in "${releases[@]}"; do
	read -r code end <"$logs/$rel.end" || { code=unknown end=$(date +%s); }
	began=$start
	if [ "${GUEST_SIDE_BY_SIDE:-1}" = 0 ]; then
		began=$prev
		prev=$end
	fi
	outcome=PASS
	if [ "$code" != 0 ]; then
		outcome="FAIL (exit $code)"
		failed=1
	fi
	echo "$rel: $outcome in $((end - began)) s"
	grep -E '^guest: ' "$logs/$rel.log" | sed 's/^/  /' || true
	grep -E '^--- (PASS|FAIL|SKIP)' "$logs/$rel.log" | sed 's/^/  /' || true
done
echo "logs: $logs"
exit $failed
