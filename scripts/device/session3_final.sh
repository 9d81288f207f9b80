#!/usr/bin/env bash
# One device call (1× H200): issue 3's new kernels, then issue 5's gpt-1b long-context memory.
#   1. GPU tests of what changed since the last GPU run: the pre-pass's hardware E4M3 conversion (bytes
#      against `formats`), the fused FP8 linear quantizer, the backward (FP8 dP, dQ summed atomically in
#      the dK/dV kernel) against the reference and the dQ kernel, accuracy vs exact, causal prefix tests.
#      A failing atomic-dQ check switches this call's copy of the tree to the dQ kernel (said below).
#   2. fp8 profile at S = 8k with a backward launch sweep, the torch.profiler trace, and the speed table
#      (fp8 vs cuDNN / flash SDPA / FlexAttention, S = 8k, 16k, D = 128).
#   3. close_out.sh longctx in the time left (gpt-1b, 2k → 8k → 32k, peak memory per stage).
#   FLAMIA_COMMIT=<sha> bash scripts/device/session3_final.sh
set -uo pipefail
T0=$SECONDS
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=25 phase tests_prepass 75 $T tests/test_quantize.py tests/test_linear_prepass.py -k "normal or ties or tiny or kernel"
TAIL=40 phase tests_attention 100 $T tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "atomic or accuracy or (matches_reference and 128) or (prefix_gpu and fp8)"
if grep -q "atomic.* FAILED\|FAILED.*atomic" "$R/tests_attention.log"; then
  echo "NOTE: atomic-dQ backward failed on the GPU: this call's copy uses the dQ kernel"
  sed -i 's/dq = "atomic" if atomic_ok else "kernel"/dq = "kernel"/' kernels/attention_bwd.py
fi
TAIL=45 phase profile 70 python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd,fwdbwd --profile --trace --bwd-configs "${BWD_CONFIGS:-8x2x32:atomic,8x2x32:kernel,8x2x16:atomic,8x1x32:atomic,8x1x16:atomic,8x3x32:atomic}" \
  --out "$R/profile"
TAIL=30 phase bench 55 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 --peers cudnn \
  --out "$R/bench"
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
LEFT=$((585 - (SECONDS - T0)))
echo "=== long context with $LEFT s left"
[ "$LEFT" -gt 120 ] && WALL=$LEFT LC_BOX=${LC_BOX:-120} LC_MIN=70 LC_VARIANTS=${LC_VARIANTS:-"fp8:full fp8:none bf16:none"} \
  bash scripts/device/close_out.sh longctx
