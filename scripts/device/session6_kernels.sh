#!/usr/bin/env bash
# Session 6's second device call (1× H200, ~420 s): the backward's `pre` copies (bf16 Q, K, scaled dO
# and V's rows read instead of converted per tile), dP issued beside S in both backward kernels, and the
# key-side pre-pass at 16 warps (bench_prepass: 0.263 -> 0.206 ms for K, 0.283 -> 0.228 for V at 8k).
#   1. GPU tests of what changed: pre vs pre=False bit for bit, kernel vs reference at D = 128, accuracy
#      vs exact, the causal prefix tests on the Triton path, the doc-masked tests;
#   2. per-kernel sweep at S = 8k (each kernel alone, with and without pre; the dQ kernel's stages);
#   3. the speed table at 8k / 16k / 32k against cuDNN, flash SDPA and FlexAttention;
#   4. the rest of the GPU tier that session6_first.sh's time box cut (prefix tests, doc masks,
#      the pre-pass kernels against `formats` at scale).
#   FLAMIA_COMMIT=<sha> bash scripts/device/session6_kernels.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=30 phase tests 110 $T tests/test_attention_gpu.py tests/test_causal_safety.py tests/test_attention_docmask.py \
  -k "pre_copies or ((triton_matches_reference and 128-fp8) or accuracy_vs_exact or (test_prefix_gpu and triton) or with_doc_ids) and fp8 and not mxfp8 and not nvfp4 and not half_tile"
TAIL=30 phase profile 90 python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd --profile --bwd-configs \
  4x2x32:half:dkdv,4x2x32:half:pre:dkdv,4x3x32:half:pre:dkdv,4x3x32:bm64:dq,4x3x32:bm64:pre:dq,4x2x32:bm64:pre:dq,4x4x32:bm64:pre:dq \
  --out "$R/profile"
TAIL=14 phase prepass 30 python3 scripts/bench_prepass.py
TAIL=30 phase bench 90 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --accuracy --out "$R/bench"
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
TAIL=30 phase tests_rest 150 $T -v tests/test_causal_safety.py tests/test_attention_docmask.py tests/test_quantize.py \
  -k "not test_gpu_triton_matches_formats_at_scale or fp8_token or fp8_key_side"
tar -czf "$OUT/results.tar.gz" -C /tmp results
