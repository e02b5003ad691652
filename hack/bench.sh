#!/usr/bin/env bash
# make bench: measures minicri with the real daemon, runc and CNI, and prints
# a table with ratios against the raw runc floor where one exists. It is a
# measurement, not a test: nothing here fails on a slow number.
set -euo pipefail
bin=${1:?bin dir}
cd "$(dirname "$0")/.."
MINICRI_BENCH=1 MINICRI_BIN_DIR="$bin" go test -tags e2e -count=1 -timeout 20m -run '^TestBench$' -v ./test/e2e/ \
	| grep -v -E '^(=== RUN|--- |PASS|ok )|level=' || true
# The monitor's memory side by side with Debian's C conmon: a monitor per
# container, one shared monitor, conmon; PSS per container.
echo
echo "monitor memory per container (PSS), idle containers:"
go test -count=1 -timeout 5m -run '^TestMonitorMemory$' -v ./conmon/ \
	| sed -n 's/.*memory_test.go:[0-9]*: //p' || true
