#!/usr/bin/env bash
# Ran at d8ff371 (the fused kernel, reverted since: slower, see docs/benchmarks.md).
# Session 11: dQ summed in the Gluon dK/dV kernel (dq = "atomic": K·dSᵀ of each sub-tile added into fp32 rows
# with relaxed atomics, so S and dP are computed once, not again in a dQ kernel). Its test against the Triton
# kernels first, then per-kernel times at S = 8k interleaved with the two-kernel default.
set -uo pipefail
source scripts/device/setup.sh
W="python3 scripts/device/with_constants.py"
FUSED="attention_bwd.FAST_DQ='atomic'"
TAIL=8 phase tests_fused 240 $GPU_TESTS tests/test_attention_gpu.py -k "fused_dq or gluon_dkdv"
for round in 1 2; do
  TAIL=1 phase "gaps_base_$round" 60 python3 scripts/launch_gaps.py --seq 8192
  TAIL=1 phase "gaps_fused_$round" 60 $W $FUSED -- scripts/launch_gaps.py --seq 8192
  TAIL=1 phase "gaps_fused2_$round" 60 $W $FUSED attention_bwd_gluon.FUSED_STAGES=2 -- scripts/launch_gaps.py \
    --seq 8192
done
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; sed -n '/training step/,$p' "$f" | grep -v "idle  _fp8\|_query\|_key_c\|at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add"; done
tar -czf "$OUT/results.tar.gz" -C /tmp results
