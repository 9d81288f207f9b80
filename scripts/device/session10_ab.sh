#!/usr/bin/env bash
# Session 10, first call: the Gluon dQ kernel with dQ(j) and S, dP(j + 1) waited for together, and the Gluon
# dK/dV kernel's off-diagonal loop in pairs of sub-tiles — bit-identity with the Triton kernels (GPU tests),
# per-kernel times against the parent commit's kernels (.gpu/base/kernels), interleaved, and the speed table.
#   rm -rf .gpu/base; mkdir -p .gpu/base; git archive 77d4e3a kernels | tar -x -C .gpu/base
#   bash scripts/device/session10_ab.sh
set -uo pipefail
source scripts/device/setup.sh
BASE=$(base_kernels)
T=$GPU_TESTS
TAIL=8 phase tests_gluon 200 $T tests/test_attention_gpu.py -k "gluon_dkdv or gluon_dq or deferred_v"
for round in 1 2; do
  TAIL=14 phase "gaps_base_$round" 60 env PYTHONPATH=$BASE python3 scripts/launch_gaps.py --seq 8192
  TAIL=14 phase "gaps_new_$round" 60 python3 scripts/launch_gaps.py --seq 8192
done
TAIL=20 phase bench 90 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --out "$R/bench"
TAIL=6 phase tests_causal 90 $T tests/test_causal_safety.py -k gluon
tar -czf "$OUT/results.tar.gz" -C /tmp results
