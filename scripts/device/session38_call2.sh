#!/usr/bin/env bash
# Session 38, call 2: D = 64, where the fp8 fast path (D = 128 only) does not run and fwd+bwd read 0.29x cuDNN in
# call 1. The Triton kernels' launch swept kernel by kernel at 8k (bench_attention --profile --profile-dim 64), and
# the table at 8k / 16k with hand-written launch files (.gpu/launch64/*.json) beside the defaults.
#   bash scripts/device/session38_call2.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
L=.gpu/launch64
TAIL=30 phase table64 200 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 64 --presets fp8 \
  --peers cudnn --modes fwd,fwdbwd --rounds 2 --launch pre=$L/pre.json --launch pre_fwd4=$L/pre_fwd4.json \
  --launch pre_all4=$L/pre_all4.json --out /tmp/results/table64
save
TAIL=40 phase sweep64 280 python3 scripts/bench_attention.py --seqs 8192 --dims 64 --presets fp8 --peers cudnn \
  --modes fwd --rounds 1 --profile --profile-dim 64 \
  --fwd-configs "8x3,4x3:bm64,8x2,4x2:bm64,4x3,8x4" \
  --bwd-configs "8x2x32:dkdv,8x2x32:dkdv:pre,4x2x32:dkdv:pre,8x3x32:dkdv:pre,4x3x32:dkdv:pre,4x3x32:dkdv:pre:half,8x2x64:dkdv:pre,8x2x32:dq,8x2x32:dq:pre,4x2x32:dq:pre,4x3x32:dq:pre:bm64,8x3x32:dq:pre,8x2x64:dq:pre" \
  --out /tmp/results/sweep64
grep "profile S" "$R/sweep64.log" | tail -30
save
