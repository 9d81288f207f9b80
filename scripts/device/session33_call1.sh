#!/usr/bin/env bash
# Session 33, call 1 (one call, ~8 minutes): V's token-block copy in P's register order (`formats.p_register_order`,
# attention_fwd_gluon.P_ORDER, the default where the Gluon forward runs).
#   bash scripts/device/session33_call1.sh   (carry .gpu; .gpu/keyorder.json = {"fwd": {"p_order": false}},
#                                             .gpu/refillqk.json = {"fwd": {"refill_qk": true}})
# 1. GPU tests: every Gluon variant and the Triton kernel on the reordered copy against the key-order copy, the pass's
#    bytes, the forward's other GPU tests (fused Q, ws, launch variants), the fp8 prefix tests.
# 2. The forward A/B: `fp8` (P order) and `fp8 [launch]` (key order) against cuDNN, 8k / 16k, three rounds.
# 3. launch_gaps at 8k: kernel times of P order, key order, and P order with the ring refilled under QKᵀ (refill_qk).
# 4. The issue's table.
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=40 phase tests 200 $GPU_TESTS tests/test_attention_gpu.py tests/test_quantize.py tests/test_causal_safety.py \
  -k "p_register_order or p_order or refill or gluon_forward or ws_forward or fused_q or launch_variants or (prefix_gpu and fp8)"
save
TAIL=16 phase ab 110 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --modes fwd --rounds 3 --launch .gpu/keyorder.json --out /tmp/results/ab
save
# kernel times at 8k, the three forwards in turn (P order; key order; P order with the refill under QKᵀ), two rounds
for round in 1 2; do
  TAIL=0 phase "gaps_p_$round" 50 python3 scripts/launch_gaps.py --seq 8192 --calls 3
  TAIL=0 phase "gaps_key_$round" 50 python3 scripts/launch_gaps.py --seq 8192 --calls 3 --launch .gpu/keyorder.json
  TAIL=0 phase "gaps_refill_$round" 50 python3 scripts/launch_gaps.py --seq 8192 --calls 3 --launch .gpu/refillqk.json
done
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep -iE "fwd_gluon|key_sides|per call|forward" "$f" | head -8; done
save
TAIL=30 phase table 170 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
