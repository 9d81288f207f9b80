#!/usr/bin/env bash
# Session 14, second call: the warp-specialized forward with its block scales loaded a tile ahead, against the
# default (interleaved, S = 8k), then Nsight Compute on it — stall reasons per SASS line, to say why its consumers
# take ~3,600 cycles a tile where their products and issue need ~1,000 (session14_ws.sh: 2.0 ms against 1.7).
#   bash scripts/device/session14_ncu.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
echo '{"fwd": {"pipe": 4}}' > /tmp/ws.json
TAIL=6 phase ab 200 python3 scripts/ab_forward.py --seqs 8192 --variants default ws --rounds 3
TAIL=40 phase ncu 240 ncu --clock-control none --kernel-name regex:_fwd_ws_kernel --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
  --print-details all -o "$R/ws" python3 scripts/profile_attention_step.py --seq 8192 --batch-heads 4x16 \
  --launch /tmp/ws.json
TAIL=3 phase sass 120 ncu -i "$R/ws.ncu-rep" --page source --csv --print-source sass
TAIL=60 phase details 60 ncu -i "$R/ws.ncu-rep" --print-details all
gzip "$R/sass.log"; rm -f "$R/ws.ncu-rep"
tar -czf "$OUT/results.tar.gz" -C /tmp results
