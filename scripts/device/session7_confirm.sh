#!/usr/bin/env bash
# Session 7's confirming call (1× H200, ~200 s): after reverting the tokens kernel's finite-tile branch
# (its transposed bytes differed from formats on the H200), the pre-pass GPU tier against formats, the
# two backward tests fixed to take the spec's own launch, and the speed table, profile and pre-pass
# parts of what lands.
#   bash scripts/device/session7_confirm.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=6 phase tests_quant 60 $T tests/test_quantize.py
TAIL=6 phase tests_bwd 40 $T tests/test_attention_gpu.py -k "atomic or half_tile"
TAIL=30 phase bench 90 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --out "$R/bench"
TAIL=12 phase profile 30 python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd --profile --out "$R/profile"
TAIL=12 phase prepass 20 python3 scripts/bench_prepass.py
tar -czf "$OUT/results.tar.gz" -C /tmp results
