#!/usr/bin/env bash
# One device call (2× H200): issue 8's 1-vs-2-GPU agreement (close_out.sh multigpu, ~120 s), then the GPU
# test tier of the kernels that had never been compiled for sm_90 (the fused FP8 linear quantizer, the
# fused dO-quantize + delta pass) next to the attention tiers, then the fp8 attention trace (where the
# ~1 ms forward pre-pass goes).   FLAMIA_COMMIT=<sha> bash scripts/device/session3_check.sh
set -uo pipefail
bash scripts/device/close_out.sh multigpu
mv -f "${OUT:-/tmp/out}/results.tar.gz" "${OUT:-/tmp/out}/multigpu.tar.gz"
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
TAIL=40 phase gpu_tests "${GPU_TESTS_S:-210}" python3 -m pytest -q -m gpu -p no:cacheprovider --tb=short \
  tests/test_linear_prepass.py tests/test_linear.py tests/test_quantize.py tests/test_attention_gpu.py \
  tests/test_attention_docmask.py tests/test_causal_safety.py
TAIL=80 phase trace "${TRACE_S:-100}" python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 \
  --peers cudnn --modes fwd,fwdbwd --trace --out "$R/trace"
tar -czf "$OUT/results.tar.gz" -C /tmp results
