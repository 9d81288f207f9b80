#!/usr/bin/env bash
# The next session's first device call (1× H200, ~420 s): what session 4 changed without device time left.
#   1. GPU tiers of the linears: the MXFP8 / NVFP4 operands now go through `quantize`'s Triton kernels
#      (16×16 NVFP4 weight blocks as 256-element groups never ran compiled), and the FP8 quantizer's split path;
#   2. speed of the emulated recipes on gpt-125m against bf16 in one process (predicted 1.5–1.9× over the
#      recorded table: docs/performance.md), 100 steps each;
#   3. gpt-1b at 8k: fp8 with the new stack defaults and fp8 + compile (host-bound rows; docs/benchmarks.md).
# Then, as its own call: `WALL=560 bash scripts/device/recipes_parity.sh parity` (issue 6's 2,000-step parity).
#   FLAMIA_COMMIT=<sha> bash scripts/device/next_session.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=10 phase tests_linear 90 $T tests/test_linear.py tests/test_linear_prepass.py
TAIL=16 phase recipes 200 python3 scripts/bench_recipes.py --model gpt-125m --steps 100 --seq-len 1024 --micro-batch 8 \
  --presets bf16 flamia nvfp4 mxfp8 --corpus .gpu/corpus32k --out "$R/recipes" --deadline 190 --no-plot \
  --extra data.cache_dir=/tmp/tok_recipes
TAIL=12 phase bench_train 120 python3 scripts/bench_train.py --model gpt-1b --recipes bf16 fp8 \
  "fp8-compile:fp8 parallel.compile=true" --contexts 8k --warmup 3 --steps 4 --profile-steps 1 \
  --tokens-per-step 16384 --micro-tokens 8192 --out "$R/bench_train" --record
cp docs/bench_train.json "$R/bench_train_recorded.json"
tar -czf "$OUT/results.tar.gz" -C /tmp results
