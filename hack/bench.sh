#!/usr/bin/env bash
# make bench: measures minicri with the real daemon, runc and CNI, and prints
# a table with ratios against the raw runc floor where one exists. It is a
# measurement, not a test: nothing here fails on a slow number.
# MINICRI_BENCH_PODS=N (make bench SCALE=N) runs the node-scale bench
# instead: N pods, the floors interleaved, the phases of each call.
set -euo pipefail
bin=${1:?bin dir}
cd "$(dirname "$0")/.."
echo "machine: $(nproc) cores, $(uname -r), $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
MINICRI_BENCH=1 MINICRI_BIN_DIR="$bin" go test -tags e2e -count=1 -timeout 30m -run '^TestBench$' -v ./test/e2e/ \
	| grep -v -E '^(=== RUN|--- |PASS|ok )|level=' || true
if [ -n "${MINICRI_BENCH_PODS:-}" ]; then
	exit 0
fi

# PullImage of a real-sized image (bench_pull_test.go), gzip and zstd, page
# cache dropped, against tar's floor measured in the same run.
bench_pull() {
	MINICRI_BENCH=1 MINICRI_BIN_DIR="$bin" go test -tags e2e -count=1 -timeout 30m -run '^TestBenchPull$' -v ./test/e2e/ \
		| grep -v -E '^(=== RUN|--- |PASS|ok )|level=' || true
}
bench_pull
# The monitor's memory side by side with Debian's C conmon: a monitor per
# container, one shared monitor, conmon; PSS per container.
echo
echo "monitor memory per container (PSS), idle containers:"
go test -count=1 -timeout 5m -run '^TestMonitorMemory$' -v ./conmon/ \
	| sed -n 's/.*memory_test.go:[0-9]*: //p' || true
# The daemon's peak RSS while it pulls the hostile layer of issue 24 item 6
# (60,000 empty directories under 4 KB paths, 2 MB gzipped).
echo
echo "image unpack memory, a hostile layer (peak RSS):"
MINICRI_BENCH=1 MINICRI_BIN_DIR="$bin" go test -tags e2e -count=1 -timeout 10m -run '^TestPullOfDeepDirectoriesStaysSmall$' -v ./test/e2e/ \
	| grep 'peak RSS,' || true
