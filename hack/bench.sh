#!/usr/bin/env bash
# make bench: measures minicri against the raw runc floor and prints a table.
# The measures arrive with the features they measure (pods, exec, memory).
set -euo pipefail
bin=${1:?bin dir}
printf '%-44s %12s %12s %8s\n' measure minicri floor ratio
printf '%-44s %12s %12s %8s\n' "(no measures yet: pods and exec are not built)" - - -
