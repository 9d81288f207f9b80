#!/usr/bin/env bash
# Session 13, first call: the Gluon forward's chained loop (pipe 3) loading each tile's two block scales a tile
# ahead. Its GPU tests (bit-identity with the Triton kernel's CHAIN launch, the fused Q, the causal prefix tests),
# then per-kernel times at S = 8k against the previous commit's kernels (.gpu/base), interleaved.
#   git archive ab68321 kernels | tar -x -C .gpu/base; bash scripts/device/session13_prefetch.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=6 phase tests_fwd 220 $GPU_TESTS tests/test_attention_gpu.py -k "gluon_forward or gluon_fused_q"
TAIL=4 phase tests_causal 90 $GPU_TESTS tests/test_causal_safety.py -k gluon
gaps_vs_base 2 "_fwd_gluon\|per call"
tar -czf "$OUT/results.tar.gz" -C /tmp results
