#!/usr/bin/env bash
# Session 10: dK and dV by two Gluon kernels, one accumulator each (attention_bwd_gluon.dkdv_split: Sᵀ twice,
# but 3-4 programs per SM instead of 2) against the fused Gluon dK/dV kernel: bit-identity with the Triton
# dK/dV kernel (GPU test, safeguards on and off), per-kernel times at S = 8k (torch.profiler), interleaved.
set -uo pipefail
source scripts/device/setup.sh
W="python3 scripts/device/with_constants.py"
SPLIT="attention_bwd_gluon.SPLIT=True"
SPLIT4="$SPLIT attention_bwd_gluon.MAXNREG_SPLIT={'dk':128,'dv':128} attention_bwd_gluon.SPLIT_STAGES={'dk':2,'dv':2}"
TAIL=8 phase tests_split 150 $W $SPLIT -- $GPU_TESTS_ARGS \
  tests/test_attention_gpu.py -k "gluon_dkdv"
for round in 1 2; do
  TAIL=4 phase "gaps_fused_$round" 60 python3 scripts/launch_gaps.py --seq 8192
  TAIL=4 phase "gaps_split_$round" 60 $W $SPLIT -- scripts/launch_gaps.py --seq 8192
  TAIL=4 phase "gaps_split4_$round" 60 $W $SPLIT4 -- scripts/launch_gaps.py --seq 8192
done
grep -h "with flamia\|_dkdv_gluon_kernel\|_dkdv_split_kernel\|_dq_gluon_kernel\|per call: kernels" "$R"/gaps_*.log
tar -czf "$OUT/results.tar.gz" -C /tmp results
