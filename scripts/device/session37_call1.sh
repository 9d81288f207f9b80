#!/usr/bin/env bash
# Session 37, call 1: the no_grad forward's wgmma no longer serialized (attention_fwd_gluon.PIN_RESCALE). The issue's
# table first, the GPU tests of the fast path with the new bit test, then an A/B of the kernels' times at 8k
# (launch_gaps.py: the no_grad forward and a training call), two rounds interleaved: the defaults, without the pin,
# and with Vᵀ's tiles on barriers of their own (SPLIT_BARRIERS).
#   bash scripts/device/session37_call1.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=40 phase table 300 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
TAIL=12 phase tests 220 $GPU_TESTS tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "pinned_rescale_and_split or launch_order_and_pdl or half_diagonal or (prefix_gpu and gluon_forward) \
  or gluon_forward_matches or relaunched or gluon_fused_q"
save
for round in 1 2; do
  TAIL=0 phase "gaps_pin_$round" 90 python3 scripts/launch_gaps.py --seq 8192
  TAIL=0 phase "gaps_nopin_$round" 90 python3 scripts/device/with_constants.py attention_fwd_gluon.PIN_RESCALE=False \
    -- scripts/launch_gaps.py --seq 8192
  [ "$round" = 1 ] && TAIL=0 phase "gaps_split_$round" 90 python3 scripts/device/with_constants.py \
    attention_fwd_gluon.SPLIT_BARRIERS=True -- scripts/launch_gaps.py --seq 8192
done
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep -E "per call|_kernel|^[a-z].*:" "$f" | head -16; done
save
