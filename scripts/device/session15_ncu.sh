#!/usr/bin/env bash
# Session 15: Nsight Compute on the backward's two kernels at S = 8k with the warp-specialized dK/dV kernel the
# default (where its time goes now: issue rate, stall reasons, tensor-pipe use), and on the forward kernel for
# comparison.
#   bash scripts/device/session15_ncu.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
for k in _dkdv_ws_kernel _dq_gluon_kernel _fwd_gluon_kernel; do
  TAIL=2 phase "ncu_$k" 150 ncu --clock-control none --kernel-name "$k" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    -o "$R/$k" python3 scripts/profile_attention_step.py --seq 8192 --batch-heads 4x16
  TAIL=60 phase "details_$k" 60 ncu -i "$R/$k.ncu-rep" --print-details all
  rm -f "$R/$k.ncu-rep"
done
tar -czf "$OUT/results.tar.gz" -C /tmp results
