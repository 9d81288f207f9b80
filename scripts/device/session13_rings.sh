#!/usr/bin/env bash
# Session 13, third call: the Gluon kernels with a TMA barrier ring per operand (fewer CTA barriers a tile). Their
# GPU tests (forward, dK/dV and dQ against the Triton kernels, the deferred copies, the causal prefix tests), then
# per-kernel times at S = 8k against the previous commit's kernels (.gpu/base = 51a9c46), interleaved.
#   git archive 51a9c46 kernels | tar -x -C .gpu/base; bash scripts/device/session13_rings.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
BASE=$(base_kernels)
TAIL=6 phase tests_gluon 300 $GPU_TESTS tests/test_attention_gpu.py -k "gluon or deferred"
TAIL=4 phase tests_causal 90 $GPU_TESTS tests/test_causal_safety.py -k gluon
for round in 1 2; do
  TAIL=1 phase "gaps_base_$round" 60 env PYTHONPATH="$BASE" python3 scripts/launch_gaps.py --seq 8192
  TAIL=1 phase "gaps_new_$round" 60 python3 scripts/launch_gaps.py --seq 8192
done
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep "_gluon_kernel\|per call" "$f"; done
tar -czf "$OUT/results.tar.gz" -C /tmp results
