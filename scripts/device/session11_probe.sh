#!/usr/bin/env bash
# Session 11: why do_bench's readings of the fp8 forward move between rounds (scripts/fwd_timing_probe.py),
# and the host's enqueue time of a forward and a training step (launch_gaps).
set -uo pipefail
source scripts/device/setup.sh
TAIL=40 phase probe 300 python3 scripts/fwd_timing_probe.py --seq 8192 --rounds 3
tar -czf "$OUT/results.tar.gz" -C /tmp results
