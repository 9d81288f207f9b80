#!/usr/bin/env bash
# Session 30, call 2 (~3 minutes): where the bench's timed milliseconds go in its own regime (alternating calls
# after an L2 flush, CUDA events), fp8 / fp8-dsk / cuDNN, fwd and fwd+bwd, at 8k and 16k.
#   bash scripts/device/session30_regime.sh
set -uo pipefail
source scripts/device/setup.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TAIL=80 phase regime8k 150 python3 scripts/device/regime_timeline.py --seq 8192 --calls 6
TAIL=12 phase regime16k 120 python3 scripts/device/regime_timeline.py --seq 16384 --calls 6
grep -E "events" "$R/regime16k.log"
tar -czf "$OUT/results.tar.gz" -C /tmp results
