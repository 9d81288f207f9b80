#!/usr/bin/env bash
# Session 21, second look: the forward beside its key-side pass with the forward's programs polling their slice's
# counter by volatile loads and a pause (an acquire poll invalidated the SM's L1 each time), and the pass's grid
# and chunk swept (with_constants: FLAGGED_WARPS, FLAGGED_CHUNK, FLAGGED_MAXNREG; launch option key_programs).
# A kernel trace of each (launch_gaps) shows the pass's and the forward's spans.
#   bash scripts/device/session21_keys2.sh   (carry .gpu: keys.json, nokeys.json)
set -uo pipefail
source scripts/device/setup.sh
TAIL=4 phase gpu_tests 200 $GPU_TESTS tests/test_attention_gpu.py -k "key_pass"
TAIL=8 phase ab 120 python3 scripts/ab_forward.py --seqs 8192 16384 --variants default nokeys --rounds 3
W=scripts/device/with_constants.py
TAIL=6 phase ab_w4c16_264 60 python3 $W quantize.FLAGGED_WARPS=4 quantize.FLAGGED_CHUNK=16 -- \
  scripts/ab_forward.py --seqs 8192 --variants kp264 nokeys --rounds 3
TAIL=6 phase ab_c64 60 python3 $W quantize.FLAGGED_CHUNK=64 -- \
  scripts/ab_forward.py --seqs 8192 --variants default nokeys --rounds 3
TAIL=6 phase ab_w16 60 python3 $W quantize.FLAGGED_WARPS=16 quantize.FLAGGED_MAXNREG=40 -- \
  scripts/ab_forward.py --seqs 8192 --variants default nokeys --rounds 3
TAIL=30 phase gaps_keys 60 python3 scripts/launch_gaps.py --seq 8192 --launch .gpu/keys.json
TAIL=12 phase gaps_nokeys 60 python3 scripts/launch_gaps.py --seq 8192 --launch .gpu/nokeys.json
tar -czf "$OUT/results.tar.gz" -C /tmp results
