#!/usr/bin/env bash
# Session 35, call 5: the forward's defaults after this session (groups of 8 heads, the dependent launch, the half
# diagonal tile) through the GPU tests and the prefix tests, then the table.
#   bash scripts/device/session35_call5.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=12 phase tests 200 $GPU_TESTS tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "launch_order_and_pdl or half_diagonal or (prefix_gpu and gluon_forward) or gluon_forward_matches or relaunched \
  or gluon_fused_q"
save
TAIL=40 phase table 300 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
