#!/usr/bin/env bash
# Session 36: the table on an H200 only, then the fast path's GPU tests while device time lasts; on any
# other card it stops at once, so a call that gets an H100 spends no more device time on a fourth H100 table of the
# same kernels.
#   bash scripts/device/session36_h200_only.sh   (carry .gpu)
set -uo pipefail
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  nvidia-smi --query-gpu=name --format=csv,noheader
  echo "not an H200: nothing run"
  exit 0
fi
source scripts/device/setup.sh  # also save() and the card's name
TAIL=40 phase table 300 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
TAIL=12 phase tests 240 $GPU_TESTS tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "launch_order_and_pdl or half_diagonal or (prefix_gpu and gluon_forward) or gluon_forward_matches or relaunched \
  or gluon_fused_q"
save
