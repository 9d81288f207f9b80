#!/usr/bin/env bash
# Session 33, call 2 (one call, ~5 minutes): the key-sides pass writes V's copy in P's register order from registers
# (call 1's permuted store indices made the pass 3.2× slower: 626 against 196 µs at 8k).
#   bash scripts/device/session33_call2.sh   (carry .gpu; .gpu/keyorder.json = {"fwd": {"p_order": false}})
# 1. GPU tests: the pass's bytes in P order, every forward kernel on that copy, the fp8
#    prefix tests.
# 2. launch_gaps at 8k: P order and key order in turn, one round.
# 3. The table at 8k and 16k (the device time left is short).
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=30 phase tests 75 $GPU_TESTS tests/test_attention_gpu.py tests/test_quantize.py tests/test_causal_safety.py \
  -k "p_register_order or p_order or (prefix_gpu and triton and not mxfp8 and not nvfp4) or prefix_gpu_gluon_forward"
save
gaps_launches 1 "key_sides|fwd_gluon|per call" p key=.gpu/keyorder.json
save
TAIL=30 phase table 90 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 \
  --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
