#!/usr/bin/env bash
# Session 10's last call: the key copies pass with K's finite-path bytes (no NaN fix where the block's amax is
# finite) in one launch or as two (KEY_COPIES_SPLIT: K's half at 16 warps) — the deferred copies' bit-identity
# on the GPU both ways, and per-kernel times at S = 8k against 57ec817's kernels (.gpu/base), interleaved.
#   rm -rf .gpu/base; mkdir -p .gpu/base; git archive 57ec817 kernels | tar -x -C .gpu/base
set -uo pipefail
source scripts/device/setup.sh
BASE=$(base_kernels)
W="python3 scripts/device/with_constants.py"
SPLIT="attention_bwd_copies.KEY_COPIES_SPLIT=True"
P="$GPU_TESTS_ARGS tests/test_attention_gpu.py -k deferred_copies"
TAIL=4 phase tests_joint 120 python3 $P
TAIL=4 phase tests_split 120 $W $SPLIT -- $P
for round in 1 2; do
  TAIL=1 phase "gaps_base_$round" 60 env PYTHONPATH=$BASE python3 scripts/launch_gaps.py --seq 8192
  TAIL=1 phase "gaps_joint_$round" 60 python3 scripts/launch_gaps.py --seq 8192
  TAIL=1 phase "gaps_split_$round" 60 $W $SPLIT -- scripts/launch_gaps.py --seq 8192
done
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; sed -n '/training/,$p' "$f" | grep "copies\|requant\|per call\|dq_gluon\|dkdv"; done
tar -czf "$OUT/results.tar.gz" -C /tmp results
