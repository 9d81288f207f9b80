#!/usr/bin/env bash
# Session 7: where the fp8 kernels' time goes, from the hardware counters (Nsight Compute), S = 8k,
# B×H = 4×16, D = 128: the forward, dK/dV and dQ kernels of the second step (the first compiles).
#   bash scripts/device/session7_ncu.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
which ncu; ncu --version | tail -1
SECTIONS="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
 --section LaunchStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats"
TAIL=60 phase ncu 420 ncu --clock-control none --kernel-name 'regex:_fwd_kernel|_dkdv_kernel|_dq_kernel' \
  --launch-skip 3 --launch-count 3 $SECTIONS --print-details all \
  python3 scripts/profile_attention_step.py --seq 8192 --batch-heads 4x16
TAIL=5 phase ncu_raw 120 ncu --clock-control none --kernel-name 'regex:_fwd_kernel|_dkdv_kernel|_dq_kernel' \
  --launch-skip 3 --launch-count 3 --metrics \
  lts__t_bytes.sum.per_second,lts__t_sectors_srcunit_tex.sum,l1tex__m_xbar2l1tex_read_bytes.sum.per_second,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum \
  python3 scripts/profile_attention_step.py --seq 8192 --batch-heads 4x16
tar -czf "$OUT/results.tar.gz" -C /tmp results
