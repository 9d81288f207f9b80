#!/usr/bin/env bash
# Session 14, the warp-specialized forward with its diagonal mask as a bias on capped scores (ptxas no longer
# serializes its wgmma): its GPU tests (the chained kernel's outputs; a future +inf / NaN key kept out of past rows),
# its time against the default and cuDNN (interleaved), then Nsight Compute on it (stall reasons per SASS line).
#   bash scripts/device/session14_mask.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
echo '{"fwd": {"pipe": 4}}' > /tmp/ws.json
TAIL=8 phase tests_ws 300 $GPU_TESTS tests/test_attention_gpu.py -k "ws_forward or future_non_finite"
TAIL=14 phase ab 240 python3 scripts/ab_forward.py --seqs 8192 16384 --variants default ws ws+nopp ws+ws4 --rounds 3
TAIL=4 phase ncu 200 ncu --clock-control none --kernel-name regex:_fwd_ws_kernel --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
  -o "$R/ws" python3 scripts/profile_attention_step.py --seq 8192 --batch-heads 4x16 --launch /tmp/ws.json
TAIL=1 phase sass 120 ncu -i "$R/ws.ncu-rep" --page source --csv --print-source sass
TAIL=40 phase details 60 ncu -i "$R/ws.ncu-rep" --print-details all
gzip "$R/sass.log"; rm -f "$R/ws.ncu-rep"
tar -czf "$OUT/results.tar.gz" -C /tmp results
