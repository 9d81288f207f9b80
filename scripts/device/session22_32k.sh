#!/usr/bin/env bash
# Session 22: why fwd+bwd at 32k read 0.99x cuDNN at 6900581 (session 18) and 0.93-0.94x since (session 21, and
# session22_debts.sh, where the dQ side stream measured no difference: 30.59 ms without against 30.52 with).
# 6900581's kernels (.gpu/base) and this tree's in one call, in turn, with cuDNN each time, then each one's kernel
# trace at 32k. And the Q pre-pass's launch at D = 64 (where the Triton forward does not quantize Q itself), swept
# twice, since one reading of it in session22_debts.sh spread 2x for unchanged kernels.
#   rm -rf .gpu/base; mkdir -p .gpu/base; git archive 6900581 kernels | tar -x -C .gpu/base
#   bash scripts/device/session22_32k.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
BASE=$(base_kernels)
for round in 1 2; do
  TAIL=4 phase "t32_base_$round" 120 env PYTHONPATH="$BASE" python3 scripts/bench_attention.py --seqs 32768 \
    --dims 128 --presets fp8 --peers cudnn --modes fwdbwd --rounds 3 --out "$R/t32_base_$round"
  TAIL=4 phase "t32_new_$round" 120 python3 scripts/bench_attention.py --seqs 32768 \
    --dims 128 --presets fp8 --peers cudnn --modes fwdbwd --rounds 3 --out "$R/t32_new_$round"
done
TAIL=30 phase gaps32_base 120 env PYTHONPATH="$BASE" python3 scripts/launch_gaps.py --seq 32768 --calls 3
TAIL=30 phase gaps32_new 120 python3 scripts/launch_gaps.py --seq 32768 --calls 3
for round in 1 2; do
  TAIL=7 phase "prepass64_$round" 90 python3 scripts/bench_prepass.py --dim 64
done
tar -czf "$OUT/results.tar.gz" -C /tmp results
