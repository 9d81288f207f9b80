#!/usr/bin/env bash
# Session 31, call 6 (one call, ~2 minutes): K's half of the key copies under `fp8` (K-major bytes in the fp8 dS
# buffer's key order, `k_t`) took 174.5 µs at 8k in call 5, against 142 for the bf16 rows it replaced and 92.5 for
# V's half: its launch at 4, 8 and 32 warps against the default 16 (the same bytes; kernel times by launch_gaps.py).
#   bash scripts/device/session31_call6.sh            (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
save() { tar -czf "$OUT/results.tar.gz" -C /tmp results; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for w in 4 8 32 16; do
  TAIL=0 phase "kwarps_$w" 40 python3 scripts/device/with_constants.py \
    "attention_bwd_copies.KEY_COPIES_WARPS={'k': $w, 'v': 8}" -- scripts/launch_gaps.py --seq 8192 --calls 3
  echo "-- K copies at $w warps"; grep -A 14 "training step" "$R/kwarps_$w.log" | grep -E "key_copies|per call"
done
save
