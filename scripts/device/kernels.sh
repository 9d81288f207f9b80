#!/usr/bin/env bash
# FLAMIA kernels on the GPU, one call (issue 3): the GPU test tier (Triton vs reference, accuracy,
# causal prefix tests, pre-pass bit-exactness), then the fp8 time profile with a launch-config
# sweep, then the speed table against cuDNN / flash SDPA / FlexAttention. Every phase time-boxed.
#   bash scripts/device/kernels.sh            (results tarred into $OUT/results.tar.gz)
set -uo pipefail
source scripts/device/setup.sh
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
TAIL=${T1:-30} phase gpu_tests "${GPU_TESTS_S:-200}" python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short \
  tests/test_attention_gpu.py tests/test_causal_safety.py tests/test_quantize.py
TAIL=40 phase profile "${PROFILE_S:-120}" python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 \
  --peers cudnn --modes fwd,fwdbwd --profile --fwd-configs "${FWD_CONFIGS:-8x3,8x3:fresh,8x4,8x2,4x3}" \
  --bwd-configs "${BWD_CONFIGS:-8x2x32:dkdv,8x2x32:dq,8x1x32,4x2x32}" --out "$R/profile"
TAIL=60 phase bench "${BENCH_S:-200}" python3 scripts/bench_attention.py --presets fp8 --out "$R/bench"
tar -czf "$OUT/results.tar.gz" -C /tmp results
