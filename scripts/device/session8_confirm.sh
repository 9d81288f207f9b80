#!/usr/bin/env bash
# Session 8's confirming call (1× H200, ~450 s): K's and Vᵀ's key-side passes in one launch at 8 warps,
# the backward's V token-block copy re-quantized as rows by the copies pass (d0a0e56, 9e92de1) — the
# pre-pass bytes against formats, the backward's bit-identity tests, the speed table, one call's kernel
# timeline, the pre-pass parts, then the rest of the GPU tier of test_attention_gpu.py and the causal
# prefix tests on the Gluon kernels.
#   bash scripts/device/session8_confirm.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=6 phase tests_quant 90 $T tests/test_quantize.py
TAIL=8 phase tests_bwd 90 $T tests/test_attention_gpu.py -k "deferred or pre_copies or half_tile or launch_variants or gluon_dkdv"
TAIL=30 phase bench 100 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --out "$R/bench"
TAIL=30 phase gaps 60 python3 scripts/launch_gaps.py --seq 8192
TAIL=14 phase prepass 30 python3 scripts/bench_prepass.py
TAIL=8 phase tests_rest 200 $T tests/test_attention_gpu.py -k "not (deferred or pre_copies or half_tile or launch_variants or gluon_dkdv)"
TAIL=6 phase tests_causal 60 $T tests/test_causal_safety.py -k gluon
tar -czf "$OUT/results.tar.gz" -C /tmp results
