#!/usr/bin/env bash
# Session 39, call 1: D = 64's measured launch (attention_fwd / attention_bwd.FAST_D64, scripts/launches/d64.json)
# checked before it becomes the default — every preset against the reference at D = 64 and the causal prefix tests'
# Triton half (their D is 64) under it — then the D = 64 table under it, then the kernels' GPU tier past session 38's
# 190 s box.
#   bash scripts/device/session39_call1.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
FAST="python3 scripts/device/with_constants.py attention_fwd.FAST_D64=True attention_bwd.FAST_D64=True --"
TAIL=6 phase d64_tests 240 $FAST $GPU_TESTS_ARGS tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "(triton_matches_reference and 64) or (prefix_gpu and not gluon)"
grep -E "triton vs reference|^FAILED" "$R/d64_tests.log" | head -20
save
TAIL=20 phase d64_table 150 $FAST scripts/bench_attention.py --seqs 2048,8192,16384,32768 --dims 64 --presets fp8 \
  --peers cudnn,flash --modes fwd,fwdbwd --rounds 2 --out /tmp/results/d64_table
save
TAIL=6 phase kernels 200 $GPU_TESTS tests/test_attention_gpu.py -k "not triton_matches_reference"
test_verdict kernels
save
