#!/usr/bin/env bash
# Session 16: the ws dK/dV kernel's ring at 4 stages (its stages are 20.6 KB since dV is FP8, so two programs still
# fit an SM) against 3, in a training step at S = 8k (launch_gaps.py, interleaved rounds).
#   bash scripts/device/session16_stages.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
for round in 1 2 3; do
  TAIL=1 phase "gaps_s3_$round" 60 python3 scripts/launch_gaps.py --seq 8192
  TAIL=1 phase "gaps_s4_$round" 60 python3 scripts/device/with_constants.py attention_dkdv_ws.STAGES=4 -- \
    scripts/launch_gaps.py --seq 8192
done
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep "dkdv_ws\|per call: kernels" "$f" | tail -2; done
tar -czf "$OUT/results.tar.gz" -C /tmp results
