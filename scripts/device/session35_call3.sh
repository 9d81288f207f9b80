#!/usr/bin/env bash
# Session 35, call 3: the new forward defaults (programs in groups of 8 heads, a programmatic dependent launch after
# the key-sides pass) checked and timed: GPU tests, then the table.
#   bash scripts/device/session35_call3.sh   (carry .gpu)
# (call 2 ran inline: launch_gaps and the forward under groups of 8 / 16 / 32 / 64 heads with pdl, at 0d2d216)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=30 phase tests 220 $GPU_TESTS tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "launch_order_and_pdl or fused_q or (prefix_gpu and gluon) or relaunched or ws_forward_fused \
  or ws_forward_in_training or gluon_forward_accuracy"
save
gaps_launches 1 "key_sides|fwd_gluon|per call" default
save
TAIL=40 phase table 300 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
