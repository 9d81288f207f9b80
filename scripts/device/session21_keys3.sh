#!/usr/bin/env bash
# Session 21, third look: the flagged key-side pass asks for the largest shared-memory carveout (its SMs were
# configured for L1, and the forward's programs could not join them until the pass left). GPU tests, the A/B against
# the forward after the pass (grid, chunk), and a kernel trace.
#   bash scripts/device/session21_keys3.sh   (carry .gpu: keys.json)
set -uo pipefail
source scripts/device/setup.sh
TAIL=4 phase gpu_tests 200 $GPU_TESTS tests/test_attention_gpu.py -k "key_pass or relaunch"
TAIL=14 phase ab 120 python3 scripts/ab_forward.py --seqs 8192 16384 --variants default nokeys kp66 --rounds 3
W=scripts/device/with_constants.py
TAIL=6 phase ab_c64 60 python3 $W quantize.FLAGGED_CHUNK=64 -- \
  scripts/ab_forward.py --seqs 8192 16384 --variants default nokeys --rounds 3
TAIL=6 phase ab_c128 60 python3 $W quantize.FLAGGED_CHUNK=128 -- \
  scripts/ab_forward.py --seqs 8192 --variants default nokeys --rounds 3
TAIL=30 phase gaps_keys 60 python3 scripts/launch_gaps.py --seq 8192 --launch .gpu/keys.json
tar -czf "$OUT/results.tar.gz" -C /tmp results
