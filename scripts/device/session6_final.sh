#!/usr/bin/env bash
# Session 6's third device call (1× H200, ~380 s): the backward's copies as two fused Triton passes
# (attention_bwd_copies; the first version's torch casts and transposes took 1.28 ms at 8k), the dK/dV
# kernel at 3 stages, dP early vs late, and the key-side pre-pass at 16 warps against `formats`.
#   FLAMIA_COMMIT=<sha> bash scripts/device/session6_final.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=30 phase tests 110 $T tests/test_attention_gpu.py tests/test_causal_safety.py tests/test_attention_docmask.py \
  -k "pre_copies or ((triton_matches_reference and 128-fp8) or accuracy_vs_exact or (test_prefix_gpu and triton) or with_doc_ids) and fp8 and not mxfp8 and not nvfp4 and not half_tile"
TAIL=30 phase profile 90 python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd --profile --bwd-configs \
  4x3x32:half:pre:dkdv,4x3x32:half:pre:late:dkdv,4x3x32:bm64:pre:dq,4x3x32:bm64:pre:late:dq,4x3x32:half:dkdv,4x3x32:bm64:dq \
  --out "$R/profile"
TAIL=30 phase bench 90 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --out "$R/bench"
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
TAIL=30 phase tests_rest 150 $T -v tests/test_quantize.py -k "fp8_key_side or launch_overrides"
tar -czf "$OUT/results.tar.gz" -C /tmp results
