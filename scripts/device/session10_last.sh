#!/usr/bin/env bash
# Session 10, closing call: the split key copies as the default — per-kernel times at S = 8k (V's half at 8 and
# at 16 warps), the speed table in three interleaved rounds, and the GPU tier of test_attention_gpu.py.
set -uo pipefail
source scripts/device/setup.sh
W="python3 scripts/device/with_constants.py"
V16="attention_bwd_copies.KEY_COPIES_WARPS={'k':16,'v':16}"
for round in 1 2; do
  TAIL=1 phase "gaps_default_$round" 60 python3 scripts/launch_gaps.py --seq 8192
  TAIL=1 phase "gaps_v16_$round" 60 $W $V16 -- scripts/launch_gaps.py --seq 8192
done
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; sed -n '/training/,$p' "$f" | grep "copies\|per call\|dq_gluon\|dkdv"; done
TAIL=12 phase bench 150 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 --peers cudnn \
  --rounds 3 --out "$R/bench"
TAIL=4 phase tests_attn 300 $GPU_TESTS tests/test_attention_gpu.py
tar -czf "$OUT/results.tar.gz" -C /tmp results
