#!/usr/bin/env bash
# Session 9, second kernel call: the forward's block scales loaded a tile ahead, the dQ kernel's a sub-tile
# ahead, and one mbarrier ring per TMA copy in the Gluon forward and dK/dV (fewer CTA barriers) — the GPU
# tests those touch, per-kernel times against 1e47dba (its kernels/ in .gpu/base/kernels), two interleaved
# rounds, then the speed table against every peer.
#   git archive 1e47dba kernels | tar -x -C .gpu/base; bash scripts/device/session9_merge.sh
set -uo pipefail
source scripts/device/setup.sh
BASE=$(base_kernels)
T=$GPU_TESTS
TAIL=10 phase tests_gluon 200 $T tests/test_attention_gpu.py -k "gluon or deferred or pre_copies or triton_matches or atomic_dq or launch_variants"
TAIL=6 phase tests_causal 90 $T tests/test_causal_safety.py -k gluon
for round in 1 2; do
  TAIL=16 phase "gaps_base_$round" 60 env PYTHONPATH=$BASE python3 scripts/launch_gaps.py --seq 8192
  TAIL=16 phase "gaps_new_$round" 60 python3 scripts/launch_gaps.py --seq 8192
done
TAIL=30 phase bench 150 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --out "$R/bench"
tar -czf "$OUT/results.tar.gz" -C /tmp results
