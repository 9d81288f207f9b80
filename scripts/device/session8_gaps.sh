#!/usr/bin/env bash
# Session 8's third call (1× H200, ~90 s): where one fp8 call's wall time goes — each kernel, the idle
# gaps between them and the host's enqueue time (scripts/launch_gaps.py) — and the pre-pass parts.
#   bash scripts/device/session8_gaps.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
TAIL=60 phase gaps 120 python3 scripts/launch_gaps.py --seq 8192
TAIL=12 phase prepass 40 python3 scripts/bench_prepass.py
tar -czf "$OUT/results.tar.gz" -C /tmp results
