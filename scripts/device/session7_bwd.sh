#!/usr/bin/env bash
# Session 7's fifth device call (1× H200, ~420 s): the sm_90 Gluon dK/dV kernel (attention_bwd_gluon)
# against the Triton one and under the causal prefix tests (with the Gluon forward, whose prefix tests
# the fourth call's time box cut), its time beside the Triton dK/dV kernel (per-query vectors by global
# loads or through the TMA stages), the dQ kernel's 64-key sub-tiles, the speed table with the Gluon
# dK/dV kernel as a launch option, and the key-side pre-pass without the NaN fix on finite tiles.
#   bash scripts/device/session7_bwd.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=30 phase tests 150 $T tests/test_attention_gpu.py -k "gluon_dkdv"
TAIL=20 phase profile 90 python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd --profile --bwd-configs \
  4x3x32:half:pre:dkdv,4x3x32:half:pre:gluon:dkdv,4x3x32:half:pre:gluon:tmastats:dkdv,4x3x32:bm64:pre:dq,4x3x64:bm64:pre:dq \
  --out "$R/profile"
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
echo '{"bwd": {"gluon": true}}' > "$R/gluon_bwd.json"
TAIL=30 phase bench 90 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn --launch "$R/gluon_bwd.json" --out "$R/bench"
TAIL=12 phase prepass 40 python3 scripts/bench_prepass.py
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
TAIL=30 phase tests_prefix 150 $T tests/test_causal_safety.py tests/test_quantize.py -k "gluon or key_side"
tar -czf "$OUT/results.tar.gz" -C /tmp results
