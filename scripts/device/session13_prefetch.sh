#!/usr/bin/env bash
# Session 13, first call: the Gluon forward's chained loop (pipe 3) loading each tile's two block scales a tile
# ahead. Its GPU tests (bit-identity with the Triton kernel's CHAIN launch, the fused Q, the causal prefix tests),
# then per-kernel times at S = 8k against the previous commit's kernels (.gpu/base), interleaved.
#   git archive ab68321 kernels | tar -x -C .gpu/base; bash scripts/device/session13_prefetch.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
BASE=$(base_kernels)
TAIL=6 phase tests_fwd 220 $GPU_TESTS tests/test_attention_gpu.py -k "gluon_forward or gluon_fused_q"
TAIL=4 phase tests_causal 90 $GPU_TESTS tests/test_causal_safety.py -k gluon
for round in 1 2; do
  TAIL=1 phase "gaps_base_$round" 60 env PYTHONPATH="$BASE" python3 scripts/launch_gaps.py --seq 8192
  TAIL=1 phase "gaps_new_$round" 60 python3 scripts/launch_gaps.py --seq 8192
done
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep "_fwd_gluon\|per call" "$f"; done
tar -czf "$OUT/results.tar.gz" -C /tmp results
