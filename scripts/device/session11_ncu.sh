#!/usr/bin/env bash
# Session 11: Nsight Compute on the Gluon dQ kernel (never profiled) and the Gluon dK/dV kernel — warp stall
# reasons, issue rate, tensor-pipe and L2 utilization — to back or refute "latency-bound, not L2-bound" with
# counters (S = 8k, B×H = 4×16, D = 128; the second step's launches, the first compiles).
set -uo pipefail
source scripts/device/setup.sh
K='regex:_dkdv_gluon_kernel|_dq_gluon_kernel'
TAIL=60 phase ncu 200 ncu --clock-control none --kernel-name "$K" --launch-skip 2 --launch-count 2 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
  --print-details all python3 scripts/profile_attention_step.py --seq 8192 --batch-heads 4x16
M=smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,lts__t_sectors.avg.pct_of_peak_sustained_elapsed
M=$M,lts__t_bytes.sum.per_second,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum,smsp__warps_active.avg.per_cycle_active
TAIL=30 phase ncu_raw 120 ncu --clock-control none --kernel-name "$K" --launch-skip 2 --launch-count 2 --metrics $M \
  python3 scripts/profile_attention_step.py --seq 8192 --batch-heads 4x16
tar -czf "$OUT/results.tar.gz" -C /tmp results
