#!/usr/bin/env bash
# Session 10: the Gluon dQ kernel at four programs per SM (maxnreg 128, 2 ring stages: 60 B of spills, 3 local
# loads a sub-tile) against its default (168 registers, 3 stages, three per SM): bit-identity with the Triton
# dQ kernel, and per-kernel times (torch.profiler, S = 8k), interleaved.
set -uo pipefail
source scripts/device/setup.sh
W="python3 scripts/device/with_constants.py"
V4="attention_bwd_gluon.MAXNREG_DQ=128 attention_bwd_gluon.DQ_STAGES=2"
TAIL=6 phase tests_dq4 120 $W $V4 -- $GPU_TESTS_ARGS \
  tests/test_attention_gpu.py -k "gluon_dq"
for round in 1 2; do
  TAIL=4 phase "gaps_base_$round" 60 python3 scripts/launch_gaps.py --seq 8192
  TAIL=4 phase "gaps_dq4_$round" 60 $W $V4 -- scripts/launch_gaps.py --seq 8192
  TAIL=4 phase "gaps_dq2st_$round" 60 $W attention_bwd_gluon.DQ_STAGES=2 -- scripts/launch_gaps.py --seq 8192
done
tar -czf "$OUT/results.tar.gz" -C /tmp results
