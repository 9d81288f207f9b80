#!/usr/bin/env bash
# Session 33, call 2 (owed: session 33 ran out of device time): V's copy in P's register order, with the key-sides pass
# that permutes the copy in registers (4d77525; call 1's permuted store indices made the pass 3.2× slower: 626 against
# 196 µs at 8k). attention_fwd_gluon.P_ORDER is off until this has passed; it turns it on for its own processes.
#   bash scripts/device/session33_call2.sh   (carry .gpu)
# Never ran: session 34's scripts/device/session34_call1.sh made these checks and timings (docs/benchmarks.md,
# "Session 34"), after which P_ORDER went on by default.
# 1. GPU tests: the pass's bytes in P order, every forward kernel on that copy, and with P_ORDER on, the fp8 prefix
#    tests through flamia_attention.
# 2. launch_gaps at 8k: P order and key order in turn, two rounds.
# 3. The issue's table, `fp8` with P order ("fp8 [launch]") beside the default.
# If all passes and the pass takes ~196 µs: set P_ORDER = True.
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
echo '{"fwd": {"p_order": true}}' > /tmp/porder.json
ON="python3 scripts/device/with_constants.py attention_fwd_gluon.P_ORDER=True --"
TAIL=30 phase tests 150 $ON $GPU_TESTS_ARGS tests/test_attention_gpu.py tests/test_quantize.py \
  tests/test_causal_safety.py -k "p_register_order or p_order or (prefix_gpu and triton and not mxfp8 and not nvfp4) \
  or prefix_gpu_gluon_forward or gluon_forward_matches or fused_q"
save
gaps_launches 2 "key_sides|fwd_gluon|per call" p=/tmp/porder.json key
save
TAIL=40 phase table 200 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --launch /tmp/porder.json \
  --out /tmp/results/table
save
