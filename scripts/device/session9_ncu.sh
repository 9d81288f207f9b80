#!/usr/bin/env bash
# Session 9: why the fp8 kernels issue on under half their cycles — Nsight Compute's warp stall reasons
# and per-pipe utilization for the Gluon forward, the Gluon dK/dV and the Triton dQ kernels (S = 8k,
# B×H = 4×16, D = 128; the second step's launches, the first compiles).
#   bash scripts/device/session9_ncu.sh
set -uo pipefail
source scripts/device/setup.sh
K='regex:_fwd_gluon_kernel|_dkdv_gluon_kernel|_dq_kernel'
SECTIONS="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
 --section ComputeWorkloadAnalysis --section InstructionStats --section MemoryWorkloadAnalysis"
TAIL=40 phase ncu 240 ncu --clock-control none --kernel-name "$K" --launch-skip 3 --launch-count 3 $SECTIONS \
  --print-details all python3 scripts/profile_attention_step.py --seq 8192 --batch-heads 4x16
M=smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
M=$M,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_xu_cycles_active.avg.pct_of_peak_sustained_active
M=$M,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum
M=$M,lts__t_bytes.sum.per_second,smsp__warps_active.avg.per_cycle_active
TAIL=30 phase ncu_raw 120 ncu --clock-control none --kernel-name "$K" --launch-skip 3 --launch-count 3 --metrics $M \
  python3 scripts/profile_attention_step.py --seq 8192 --batch-heads 4x16
tar -czf "$OUT/results.tar.gz" -C /tmp results
