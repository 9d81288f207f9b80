#!/usr/bin/env bash
# Session 16: what FP8 dV / dK products would buy the warp-specialized dK/dV kernel (scripts/bwd_fp8_probe.py: the
# kernel with those products swapped for FP8 ones of the same shapes, timed against the real kernel, interleaved).
#   bash scripts/device/session16_probe.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=8 phase probe_8k 240 python3 scripts/bwd_fp8_probe.py --seq 8192 --heads 64 --rounds 5
TAIL=8 phase probe_16k 240 python3 scripts/bwd_fp8_probe.py --seq 16384 --heads 32 --rounds 3
tar -czf "$OUT/results.tar.gz" -C /tmp results
