#!/usr/bin/env bash
# Session 9: the Gluon dK/dV kernel reading its query statistics by TMA (de4d71c) — its bit-identity with
# the Triton dK/dV kernel, the causal prefix tests on the Gluon kernels, then per-kernel times against the
# commit before (its kernels/ carried in .gpu/base/kernels), two rounds each, interleaved, and the speed table.
#   git archive <base> kernels | tar -x -C .gpu/base; bash scripts/device/session9_stats.sh
set -uo pipefail
source scripts/device/setup.sh
BASE=$(base_kernels)
T=$GPU_TESTS
TAIL=8 phase tests_dkdv 120 $T tests/test_attention_gpu.py -k "gluon_dkdv or deferred or pre_copies"
TAIL=6 phase tests_causal 90 $T tests/test_causal_safety.py -k gluon
for round in 1 2; do
  TAIL=22 phase "gaps_base_$round" 60 env PYTHONPATH=$BASE python3 scripts/launch_gaps.py --seq 8192
  TAIL=22 phase "gaps_new_$round" 60 python3 scripts/launch_gaps.py --seq 8192
done
TAIL=30 phase bench 100 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --out "$R/bench"
tar -czf "$OUT/results.tar.gz" -C /tmp results
