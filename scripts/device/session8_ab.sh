#!/usr/bin/env bash
# Session 8's first call (1× H200, ~300 s): the Gluon forward with Q quantized in the kernel (the fast
# path's new default), O's fp8 copy skipped without gradients, and the chained variant pipe 4 — their GPU
# tests (bytes against the pre-pass, bit-identity with the Triton kernel, the causal prefix tests), an
# interleaved A/B of the forward variants against cuDNN, and the speed table of the new default.
#   bash scripts/device/session8_ab.sh
# Ran at 4d43597. pipe 4 measured slower (1.980 vs 1.758 ms at 8k) and was removed after it.
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=8 phase tests_fwd 200 $T tests/test_attention_gpu.py -k "gluon or fused_q"
TAIL=6 phase tests_causal 90 $T tests/test_causal_safety.py -k gluon
TAIL=20 phase ab 150 python3 scripts/ab_forward.py --seqs 8192 16384 --variants default qpass pipe4 --rounds 3 \
  --out "$R/ab.json"
TAIL=30 phase bench 100 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --out "$R/bench"
tar -czf "$OUT/results.tar.gz" -C /tmp results
