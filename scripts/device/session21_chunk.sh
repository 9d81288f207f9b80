#!/usr/bin/env bash
# Session 21: the forward's key-side pass with its blocks CHUNK tokens a step (launch option "chunk": fewer registers
# a thread, so more programs an SM; each block read twice). GPU bytes tests, the pass's launches timed
# (bench_prepass), then the forward at the fastest chunked launches against the default (ab_forward, two processes).
#   bash scripts/device/session21_chunk.sh
set -uo pipefail
source scripts/device/setup.sh
TAIL=4 phase gpu_tests 150 $GPU_TESTS tests/test_quantize.py -k "chunked or key_sides_in_one"
TAIL=14 phase prepass_8k 90 python3 scripts/bench_prepass.py
TAIL=14 phase prepass_16k 90 python3 scripts/bench_prepass.py --seq 16384 --batch 2
W=scripts/device/with_constants.py
TAIL=5 phase ab_plain 60 python3 scripts/ab_forward.py --seqs 8192 16384 --variants default --rounds 3
TAIL=5 phase ab_c32w8 60 python3 $W quantize.KEY_SIDES_CHUNK=32 -- scripts/ab_forward.py --seqs 8192 16384 \
  --variants default --rounds 3
TAIL=5 phase ab_c16w4 60 python3 $W quantize.KEY_SIDES_CHUNK=16 quantize.KEY_SIDES_WARPS=4 -- \
  scripts/ab_forward.py --seqs 8192 16384 --variants default --rounds 3
TAIL=5 phase ab_plain2 60 python3 scripts/ab_forward.py --seqs 8192 16384 --variants default --rounds 3
tar -czf "$OUT/results.tar.gz" -C /tmp results
