#!/usr/bin/env bash
# Session 32, call 7 (one call, ~4 minutes): dq_from_ds at its new ring stages (fp8 buffer 5, bf16 4; calls 5-6).
#   1. GPU tests: ds_out's dQ against the dQ kernel's and the reference (both buffers), the relaunch test, the prefix
#      tests of both fp8 presets;
#   2. the kernels of a training call at 8k, `fp8` and `fp8-bf16dq` (launch_gaps.py);
#   3. the issue's table at this session's defaults: 8k / 16k / 32k, fwd and fwd+bwd, `fp8` and `fp8-bf16dq` against
#      cuDNN and flash, three rounds.
#   bash scripts/device/session32_call7.sh            (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=0 phase tests 150 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py -k "ds_out or fp8_ds or relaunch or test_prefix_gpu[fp8-triton] or test_prefix_gpu[fp8-bf16dq-triton]"
grep -E "PASSED|FAILED|ERROR" "$R/tests.log" | sed -E 's/ (PASSED|FAILED|ERROR).*/ \1/' | tail -30
test_verdict
save
TAIL=0 phase gaps_fp8 40 python3 scripts/launch_gaps.py --seq 8192 --calls 3
TAIL=0 phase gaps_bf16dq 40 python3 scripts/launch_gaps.py --seq 8192 --calls 3 --preset fp8-bf16dq
for f in fp8 bf16dq; do echo "-- $f"; grep -A 14 "training step" "$R/gaps_$f.log"; done
save
TAIL=30 phase table 120 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
