#!/usr/bin/env bash
# Session 18: the host time of each step of the fp8 forward's path (scripts/host_overhead_probe.py --parts).
#   bash scripts/device/session18_parts.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=40 phase parts 200 python3 scripts/host_overhead_probe.py --seqs 8192 ${PARTS_ARGS:---parts}
tar -czf "$OUT/results.tar.gz" -C /tmp results
