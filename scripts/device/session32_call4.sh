#!/usr/bin/env bash
# Session 32, call 4 (one call, ~3 minutes): FOLD_V per dS buffer kind ({"fp8": True, "bf16": False}) after call 3
# found the V fold slower over the bf16 buffer.
#   1. GPU tests: fold_k's bits with V's copies folded under both presets (FOLD_V forced on for both), the relaunch
#      test, the prefix tests of both fp8 presets;
#   2. the kernels of a training call at 8k, `fp8-bf16dq` and `fp8`, at the defaults (launch_gaps.py).
#   bash scripts/device/session32_call4.sh            (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=0 phase tests 150 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py -k "fold_k or relaunch or test_prefix_gpu[fp8-triton] or test_prefix_gpu[fp8-bf16dq-triton]"
grep -E "fold_v|relaunched vs|PASSED|FAILED|ERROR" "$R/tests.log" | cut -c1-200 | tail -20
test_verdict
save
TAIL=0 phase gaps_bf16dq 40 python3 scripts/launch_gaps.py --seq 8192 --calls 3 --preset fp8-bf16dq
TAIL=0 phase gaps_fp8 40 python3 scripts/launch_gaps.py --seq 8192 --calls 3
for f in bf16dq fp8; do echo "-- $f"; grep -A 14 "training step" "$R/gaps_$f.log"; done
save
