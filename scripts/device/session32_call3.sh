#!/usr/bin/env bash
# Session 32, call 3 (one call, ~8 minutes; phases boxed within 600 s): the new defaults (FOLD_K_T and FOLD_V on).
#   1. the GPU tier of the attention and causal-safety tests (time-boxed);
#   2. the issue's table: 8k / 16k / 32k, fwd and fwd+bwd, `fp8` and `fp8-bf16dq` against cuDNN and flash, three
#      rounds;
#   3. `fp8-bf16dq` (fold_k over the bf16 buffer) with FOLD_V on (the default) and off, two rounds each in turn, and
#      the `fp8` kernels of a training call at 8k (launch_gaps.py).
#   bash scripts/device/session32_call3.sh            (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=0 phase tests 290 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py
grep -E "PASSED|FAILED|ERROR" "$R/tests.log" | sed -E 's/ (PASSED|FAILED|ERROR).*/ \1/' | grep -c PASSED
grep -E "FAILED|ERROR|passed|failed|Timeout" "$R/tests.log" | cut -c1-240 | tail -12
grep -E "cos|cosine" "$R/tests.log" | cut -c1-240 | tail -6
save
TAIL=30 phase table 120 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
OFF="python3 scripts/device/with_constants.py attention_bwd.FOLD_V=False --"
for round in 1 2; do
  TAIL=0 phase "gaps_bf16dq_on_$round" 40 python3 scripts/launch_gaps.py --seq 8192 --calls 3 --preset fp8-bf16dq
  TAIL=0 phase "gaps_bf16dq_off_$round" 40 $OFF scripts/launch_gaps.py --seq 8192 --calls 3 --preset fp8-bf16dq
done
TAIL=0 phase gaps_fp8 40 python3 scripts/launch_gaps.py --seq 8192 --calls 3
for f in bf16dq_on_1 bf16dq_off_1 bf16dq_on_2 bf16dq_off_2 fp8; do
  echo "-- $f"; grep -A 14 "training step" "$R/gaps_$f.log"
done
save
