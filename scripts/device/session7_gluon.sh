#!/usr/bin/env bash
# Session 7's second device call (1× H200, ~400 s): the sm_90 Gluon forward (attention_fwd_gluon:
# TMA ring, QKᵀ(t + 1) in flight during the softmax of tile t) against the Triton kernel, bit for
# bit and under the causal prefix tests; its launch variants timed; the speed table with it; the
# pre-pass with one IEEE division per row (quantize._div_by_shared) against `formats` and timed.
#   bash scripts/device/session7_gluon.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=40 phase tests 150 $T tests/test_attention_gpu.py tests/test_causal_safety.py -k "gluon"
TAIL=20 phase tests_quant 120 $T tests/test_quantize.py $(ls tests/test_quantize_division.py 2>/dev/null)
TAIL=30 phase profile 100 python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd --profile --fwd-configs 4x3:bm64,4x3:gluon,4x2:gluon,4x2:gluon:pipe1,4x2:gluon:pipe0 --out "$R/profile"
TAIL=20 phase prepass 60 python3 scripts/bench_prepass.py
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
echo '{"fwd": {"gluon": true}}' > "$R/gluon.json"
TAIL=30 phase bench 120 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --launch "$R/gluon.json" --out "$R/bench"
tar -czf "$OUT/results.tar.gz" -C /tmp results
