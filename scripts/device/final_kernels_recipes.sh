#!/usr/bin/env bash
# Third device call of 2026-11-30 (2× H200, < 450 s): GPU 0 — the blockwise _scaled_mm scale-layout
# probe, the attention speed table after the fused key-side pre-pass, fp8-block's 300 steps with the
# native-GEMM check, the GPU tiers of the document-masking and pre-pass tests; GPU 1 — the recipes the
# first call did not reach (mxfp8, nvfp4) with their own bf16 reference. Results tarred into $OUT.
set -uo pipefail
source scripts/device/setup.sh
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
C=.gpu/corpus32k
REC=(--model gpt-125m --steps 300 --seq-len 1024 --micro-batch 8 --device cuda --corpus "$C" --no-plot)
CUDA_VISIBLE_DEVICES=1 timeout -k 10 400 python3 scripts/bench_recipes.py "${REC[@]}" --presets bf16 mxfp8 nvfp4 \
  --out "$R/recipes2" --deadline 370 --extra data.cache_dir=/tmp/tok_r2 > "$R/recipes2.log" 2>&1 &
REC_PID=$!
export CUDA_VISIBLE_DEVICES=0
TAIL=40 phase probe 60 python3 scripts/device/probe_blockwise.py
TAIL=70 phase bench 150 python3 scripts/bench_attention.py --presets fp8 --out "$R/bench"
TAIL=8 phase fp8block 130 python3 scripts/bench_recipes.py "${REC[@]}" --presets fp8-block --out "$R/recipes_fp8block" \
  --deadline 110 --extra data.cache_dir=/tmp/tok_fb
TAIL=15 phase gpu_tests 80 python3 -m pytest -q -m gpu -p no:cacheprovider --tb=line tests/test_attention_docmask.py \
  tests/test_quantize.py
wait $REC_PID; echo "=== recipes2 exit $? ($SECONDS s)"; tail -n 14 "$R/recipes2.log"
tar -czf "$OUT/results.tar.gz" -C /tmp results
