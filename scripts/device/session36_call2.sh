#!/usr/bin/env bash
# Session 36, call 2: the forward plan (attention_fwd.plan) through the GPU tests of the fast path, then where the
# fp8 forward + backward's last ~0.1 ms goes (scripts/device/bwd_tail_probe.py).
#   bash scripts/device/session36_call2.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=12 phase tests 240 $GPU_TESTS tests/test_attention_gpu.py tests/test_causal_safety.py tests/test_quantize.py \
  -k "launch_order_and_pdl or half_diagonal or (prefix_gpu and gluon_forward) or gluon_forward_matches or relaunched \
  or gluon_fused_q or walking_grid"
save
TAIL=20 phase tail8k 120 python3 scripts/device/bwd_tail_probe.py --seq 8192 --calls 8
TAIL=20 phase tail16k 120 python3 scripts/device/bwd_tail_probe.py --seq 16384 --calls 6
TAIL=8 phase tail8k_bf16dq 120 python3 scripts/device/bwd_tail_probe.py --seq 8192 --calls 8 --preset fp8-bf16dq
save
