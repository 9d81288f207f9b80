#!/usr/bin/env bash
# One device call (1× H200), after session3_final.sh found the dQᵀ form of the atomic backward writing
# wrong addresses (now `dq=atomic_t`, transposed back before its atomics; the default `atomic` is the form
# that passed on the GPU in session3_recipes.sh):
#   1. GPU tests: the nvfp4 linear paths with the same SR draws on both devices; the backward (atomic, then
#      atomic_t in its own process: a crash there cannot poison the rest), reference match, accuracy vs
#      exact, causal prefix tests;
#   2. fp8 profile at S = 8k with the backward launch sweep (atomic_t last, same reason);
#   3. the attention speed table, D = 128, S = 8k / 16k / 32k, against cuDNN, flash SDPA and FlexAttention;
#   4. bench_train.py (issue 6): gpt-1b at 8k, bf16 / fp8 / flamia in one process.
#   FLAMIA_COMMIT=<sha> bash scripts/device/session3_last.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=8 phase tests_linear 40 $T tests/test_linear.py -k test_gpu_paths_match_cpu_emulation
TAIL=40 phase tests_attention 90 $T tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "(atomic and rows) or accuracy or (matches_reference and 128) or (prefix_gpu and fp8)"
TAIL=8 phase tests_atomic_t 30 $T tests/test_attention_gpu.py -k "atomic and transposed"
if grep -q "FAILED" "$R/tests_attention.log"; then
  echo "NOTE: a backward test failed: this call's copy uses the dQ kernel"
  sed -i 's/dq = "atomic" if atomic_ok else "kernel"/dq = "kernel"/' kernels/attention_bwd.py
fi
TAIL=20 phase profile 60 python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd,fwdbwd --profile --bwd-configs "8x2x32:kernel,8x2x16:atomic,8x1x32:atomic,8x2x16:kernel,8x2x32:atomic_t" \
  --out "$R/profile"
TAIL=30 phase bench 110 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --out "$R/bench"
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
TAIL=30 phase bench_train 170 python3 scripts/bench_train.py --model gpt-1b --recipes bf16 fp8 flamia --contexts 8k \
  --warmup 3 --steps 4 --profile-steps 1 --tokens-per-step 16384 --micro-tokens 8192 --out "$R/bench_train"
tar -czf "$OUT/results.tar.gz" -C /tmp results
