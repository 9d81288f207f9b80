#!/usr/bin/env bash
# Session 13, third call: the Gluon kernels with a TMA barrier ring per operand (fewer CTA barriers a tile). Their
# GPU tests (forward, dK/dV and dQ against the Triton kernels, the deferred copies, the causal prefix tests), then
# per-kernel times at S = 8k against the previous commit's kernels (.gpu/base = 51a9c46), interleaved.
#   git archive 51a9c46 kernels | tar -x -C .gpu/base; bash scripts/device/session13_rings.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=6 phase tests_gluon 300 $GPU_TESTS tests/test_attention_gpu.py -k "gluon or deferred"
TAIL=4 phase tests_causal 90 $GPU_TESTS tests/test_causal_safety.py -k gluon
gaps_vs_base 2 "_gluon_kernel\|per call"
tar -czf "$OUT/results.tar.gz" -C /tmp results
