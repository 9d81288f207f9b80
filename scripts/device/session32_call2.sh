#!/usr/bin/env bash
# Session 32, call 2 (one call, ~7 minutes; phases boxed within 600 s): V's copies folded into the ws dK/dV kernel
# (attention_bwd.FOLD_V: V's rows transposed from Vᵀ's bytes in shared memory, its token-block copy re-quantized
# there; with fold_k no key copies pass runs), and K's K-major bytes over the fp8 buffer (FOLD_K_T) timed again.
#   1. GPU tests with FOLD_K_T on: fold_k's bits with and without V's copies folded (both fp8 presets), the relaunch
#      test, the fp8 buffer against the reference, the prefix tests of both fp8 presets;
#   2. kernel times at 8k, three rounds in turn: FOLD_K_T off (the default), on with FOLD_V off, on with FOLD_V on;
#   3. the 8k / 16k fwd+bwd of `fp8` against cuDNN, three rounds: the defaults, then FOLD_K_T on (FOLD_V on).
#   bash scripts/device/session32_call2.sh            (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
KT="python3 scripts/device/with_constants.py attention_bwd.FOLD_K_T=True"
TAIL=0 phase tests 170 $KT -- -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "fold_k or relaunch or fp8_ds_out or test_prefix_gpu[fp8-triton] or test_prefix_gpu[fp8-bf16dq-triton]"
grep -E "fold_k |fold_v|relaunched vs|PASSED|FAILED|ERROR" "$R/tests.log" | cut -c1-220 | tail -30
test_verdict
save
for round in 1 2 3; do
  TAIL=0 phase "gaps_off_$round" 40 python3 scripts/launch_gaps.py --seq 8192 --calls 3
  TAIL=0 phase "gaps_kt_$round" 40 $KT attention_bwd.FOLD_V=False -- scripts/launch_gaps.py --seq 8192 --calls 3
  TAIL=0 phase "gaps_ktv_$round" 40 $KT -- scripts/launch_gaps.py --seq 8192 --calls 3
done
for f in off_1 kt_1 ktv_1 off_2 kt_2 ktv_2 off_3 kt_3 ktv_3; do
  echo "-- $f"; grep -A 14 "training step" "$R/gaps_$f.log" | grep -E "key_copies|dkdv|per call"
done
save
TAIL=5 phase table_off 70 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets "fp8" \
  --peers cudnn --modes fwdbwd --rounds 3 --out /tmp/results/table_off
TAIL=5 phase table_ktv 70 $KT -- scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets "fp8" \
  --peers cudnn --modes fwdbwd --rounds 3 --out /tmp/results/table_ktv
save
