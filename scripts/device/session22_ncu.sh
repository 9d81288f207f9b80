#!/usr/bin/env bash
# Session 22: Nsight Compute on the three fp8 kernels as they are now (the Gluon forward, the warp-specialized
# dK/dV kernel, the Gluon dQ kernel; S = 8k, B×H = 4×16, D = 128, the second step's launches): which unit each one
# keeps busy — issue, the tensor pipe, shared memory (MIO / LSU wavefronts), L2 — and why its warps wait. Session 17
# counted issue and tensor pipes at 30-50% for both backward kernels; session22_kvregs.sh found the dK/dV kernel
# slower, not faster, with a third less operand traffic from shared memory, and the dQ kernel beside the dK/dV one
# (dq_stream) no faster than after it: some shared unit may set the pace, which counters can name.
#   bash scripts/device/session22_ncu.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
K='regex:_fwd_gluon_kernel|_dkdv_ws_kernel|_dq_gluon_kernel'
STEP="python3 scripts/profile_attention_step.py --seq 8192 --batch-heads 4x16"
TAIL=3 phase ncu 300 ncu --clock-control none --kernel-name "$K" --launch-skip 3 --launch-count 3 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section Occupancy --print-details all $STEP
M=smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active
M=$M,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed
M=$M,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
M=$M,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum
M=$M,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
M=$M,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum,smsp__warps_active.avg.per_cycle_active
TAIL=60 phase ncu_raw 200 ncu --clock-control none --kernel-name "$K" --launch-skip 3 --launch-count 3 --metrics "$M" \
  $STEP
gzip "$R/ncu.log"
tar -czf "$OUT/results.tar.gz" -C /tmp results
