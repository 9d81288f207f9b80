#!/usr/bin/env bash
# Session 15: Nsight Compute's stall samples per SASS line of the warp-specialized dK/dV kernel at 8k (its CTA-barrier
# stalls, 4.1 of 9.4 cycles an instruction in session15_ncu.sh: which barriers), the whole listing gzipped.
#   bash scripts/device/session15_ncu_src.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=2 phase ncu 200 ncu --clock-control none --kernel-name _dkdv_ws_kernel --launch-skip 1 --launch-count 1 \
  --section WarpStateStats --section SourceCounters -o "$R/ws" python3 scripts/profile_attention_step.py --seq 8192 \
  --batch-heads 4x16
TAIL=1 phase sass 120 ncu -i "$R/ws.ncu-rep" --page source --csv --print-source sass
gzip "$R/sass.log"; rm -f "$R/ws.ncu-rep"
tar -czf "$OUT/results.tar.gz" -C /tmp results
