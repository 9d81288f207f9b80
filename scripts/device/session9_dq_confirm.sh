#!/usr/bin/env bash
# Session 9's last call: the Gluon dQ kernel as the fast path's default — the whole GPU tier of
# test_attention_gpu.py, the causal prefix tests on the Gluon kernels (a spy checks the Gluon dQ ran),
# per-kernel times against 3551420's kernels (.gpu/base/kernels), interleaved, and the speed table.
#   rm -rf .gpu/base; mkdir -p .gpu/base; git archive 3551420 kernels | tar -x -C .gpu/base
#   bash scripts/device/session9_dq_confirm.sh
set -uo pipefail
source scripts/device/setup.sh
BASE=$(base_kernels)
T=$GPU_TESTS
for round in 1 2; do
  TAIL=14 phase "gaps_base_$round" 60 env PYTHONPATH=$BASE python3 scripts/launch_gaps.py --seq 8192
  TAIL=14 phase "gaps_new_$round" 60 python3 scripts/launch_gaps.py --seq 8192
done
TAIL=20 phase bench 90 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --out "$R/bench"
TAIL=6 phase tests_causal 90 $T tests/test_causal_safety.py -k gluon
TAIL=8 phase tests_attn 280 $T tests/test_attention_gpu.py
tar -czf "$OUT/results.tar.gz" -C /tmp results
