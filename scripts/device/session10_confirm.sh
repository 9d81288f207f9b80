#!/usr/bin/env bash
# Session 10's confirmation, call 1 of 2: the GPU tier of test_attention_gpu.py (K's deferred token-block copy,
# the dQ kernel at four programs per SM), the causal prefix tests on the Gluon kernels, and per-kernel times
# at S = 8k against 77d4e3a's kernels (.gpu/base/kernels), two interleaved rounds.
#   rm -rf .gpu/base; mkdir -p .gpu/base; git archive 77d4e3a kernels | tar -x -C .gpu/base
#   bash scripts/device/session10_confirm.sh      # then session10_bench.sh
set -uo pipefail
source scripts/device/setup.sh
BASE=$(base_kernels)
T=$GPU_TESTS
TAIL=10 phase tests_attn 330 $T tests/test_attention_gpu.py
TAIL=6 phase tests_causal 90 $T tests/test_causal_safety.py -k gluon
for round in 1 2; do
  TAIL=3 phase "gaps_base_$round" 60 env PYTHONPATH=$BASE python3 scripts/launch_gaps.py --seq 8192
  TAIL=3 phase "gaps_new_$round" 60 python3 scripts/launch_gaps.py --seq 8192
done
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; sed -n '/training/,$p' "$f" | grep -v "^$"; done
tar -czf "$OUT/results.tar.gz" -C /tmp results
