#!/usr/bin/env bash
# Session 36, call 3: the session's final kernels (the forward plan, the diagonal tile's QKᵀ in one place) through the
# GPU tests of the fast path, the prefix tests among them, then the table.
#   bash scripts/device/session36_call3.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=12 phase tests 240 $GPU_TESTS tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "launch_order_and_pdl or half_diagonal or (prefix_gpu and gluon_forward) or gluon_forward_matches or relaunched \
  or gluon_fused_q"
save
TAIL=40 phase table 300 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
