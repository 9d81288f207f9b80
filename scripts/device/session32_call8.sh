#!/usr/bin/env bash
# Session 32, call 8 (one call, ~3 minutes): ρ of the FP8 dQ product from ‖dO8_i‖₁ written by dO's pass
# (`quantize_fp8_per_token_with_delta(row_l1=True)`), so that `_dq_row_scale_kernel` no longer reads dO's bytes.
#   1. GPU tests: the fast path against the reference (`fp8`), the fp8 dS buffer and ds_out, the relaunch test, the
#      prefix tests of both fp8 presets;
#   2. the kernels of a training call at 8k, `fp8`, two rounds (launch_gaps.py).
#   bash scripts/device/session32_call8.sh            (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=0 phase tests 150 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py tests/test_quantize.py -k "ds_out or fp8_ds or relaunch or fused_delta or \
test_prefix_gpu[fp8-triton] or test_prefix_gpu[fp8-bf16dq-triton] or test_gpu_triton_matches_reference[128-fp8]"
grep -E "PASSED|FAILED|ERROR" "$R/tests.log" | sed -E 's/ (PASSED|FAILED|ERROR).*/ \1/' | tail -30
test_verdict
save
for round in 1 2; do
  TAIL=0 phase "gaps_$round" 40 python3 scripts/launch_gaps.py --seq 8192 --calls 3
  grep -A 14 "training step" "$R/gaps_$round.log"
done
save
