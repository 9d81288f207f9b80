#!/usr/bin/env bash
# Session 34, call 1: session 33's owed call 2 (V's copy in P's register order, with the key-sides pass that permutes
# the copy in registers) and the first run of the launch option "overlap" (attention_fwd_overlap: K's and V's pass of
# later head groups on a side stream under the forward kernel of earlier ones).
#   bash scripts/device/session34_call1.sh   (carry .gpu; at a4d9a88: the overlap option was removed after this call,
#   which measured it slower than the plain launch order, docs/benchmarks.md "Session 34")
# 1. GPU tests, with attention_fwd_gluon.P_ORDER on: the pass's bytes in P order, every forward kernel on that copy,
#    the fp8 prefix tests through flamia_attention; the overlap's bits (real streams) and the pass's ranges.
# 2. launch_gaps at 8k: P order and key order (the pass should take ~196 µs, not call 1's 626).
# 3. The table at 8k / 16k: fp8 by default, with P order, and with P order split into 2 and 4 groups.
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
echo '{"fwd": {"p_order": true}}' > /tmp/porder.json
echo '{"fwd": {"p_order": true, "overlap": 2}}' > /tmp/ov2.json
echo '{"fwd": {"p_order": true, "overlap": 4}}' > /tmp/ov4.json
ON="python3 scripts/device/with_constants.py attention_fwd_gluon.P_ORDER=True --"
TAIL=30 phase tests 170 $ON $GPU_TESTS_ARGS tests/test_attention_gpu.py tests/test_quantize.py \
  tests/test_causal_safety.py -k "p_register_order or p_order or (prefix_gpu and triton and not mxfp8 and not nvfp4) \
  or prefix_gpu_gluon_forward or gluon_forward_matches or fused_q or overlap or fill_ranges"
save
gaps_launches 1 "key_sides|fwd_gluon|per call" p=/tmp/porder.json key
save
TAIL=40 phase table 230 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --launch porder=/tmp/porder.json --launch ov2=/tmp/ov2.json \
  --launch ov4=/tmp/ov4.json --out /tmp/results/table
save
