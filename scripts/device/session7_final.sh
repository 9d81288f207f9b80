#!/usr/bin/env bash
# Session 7's last device call (1× H200, ~450 s): the defaults as they land. The pre-pass's finite-tile
# branch against `formats` (the GPU tier of test_quantize.py), the speed table with every peer, the 8k
# profile and the pre-pass parts, then the Gluon dK/dV kernel against the Triton one (safeguards on and
# off), the causal prefix tests on both Gluon kernels, and the backward's launch-option tests.
#   bash scripts/device/session7_final.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=8 phase tests_quant 80 $T tests/test_quantize.py
TAIL=40 phase bench 100 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --out "$R/bench"
TAIL=12 phase profile 40 python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd --profile --out "$R/profile"
TAIL=12 phase prepass 30 python3 scripts/bench_prepass.py
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
TAIL=20 phase tests_gluon 120 $T tests/test_attention_gpu.py tests/test_causal_safety.py -k "gluon_dkdv or gluon_forward or gluon_backward"
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
TAIL=20 phase tests_bwd 100 $T tests/test_attention_gpu.py -k "backward or atomic or (triton_matches_reference and 128-fp8) or (accuracy_vs_exact and fp8 and not nvfp4 and not mxfp8)"
tar -czf "$OUT/results.tar.gz" -C /tmp results
