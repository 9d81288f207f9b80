#!/usr/bin/env bash
# Session 8's fourth call (1× H200, ~300 s): the forward's key-side pre-pass with Vᵀ transposed two tokens
# per int16 (5f9d9b0) and K's and Vᵀ's passes in one launch — their bytes against formats (the GPU tier of
# test_quantize.py), the attention kernels' GPU tests on them, the pre-pass parts, the speed table and
# one call's kernel timeline.
#   bash scripts/device/session8_prepass.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=6 phase tests_quant 90 $T tests/test_quantize.py
TAIL=12 phase prepass 40 python3 scripts/bench_prepass.py
TAIL=8 phase tests_fwd 120 $T tests/test_attention_gpu.py -k "gluon or fused_q or prepass or matches_reference"
TAIL=6 phase tests_causal 60 $T tests/test_causal_safety.py -k gluon
TAIL=30 phase bench 100 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --out "$R/bench"
TAIL=30 phase gaps 60 python3 scripts/launch_gaps.py --seq 8192
tar -czf "$OUT/results.tar.gz" -C /tmp results
