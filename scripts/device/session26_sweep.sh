#!/usr/bin/env bash
# Session 26, a second call after session26_fp8ds.sh: dq_from_ds's launch over the fp8 dS buffer (8 warps × 3 stages
# by default) against 2 and 4 stages and 4 warps, each kernel's time at S = 8k from scripts/launch_gaps.py under
# launch options ds_out with fp8_dq, two rounds in turn; then the bf16 buffer's launch once more for the same card,
# and fwd+bwd at 32k (the fp8 dS rows beside the default's and cuDNN's: its 16 heads in two chunks of 8, the bf16
# buffer's in four).
#   bash scripts/device/session26_sweep.sh
set -uo pipefail
source scripts/device/setup.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
WC="python3 scripts/device/with_constants.py"
echo '{"bwd": {"fp8_dq": true, "ds_fp8": true}}' > /tmp/fp8ds.json
for round in 1 2; do
  for variant in "dq_from_ds.STAGES=3" "dq_from_ds.STAGES=2" "dq_from_ds.STAGES=4" "dq_from_ds.WARPS=4"; do
    TAIL=0 phase "gaps_${variant//[^A-Za-z0-9]/_}_$round" 60 $WC "$variant" -- scripts/launch_gaps.py --seq 8192 \
      --calls 3 --launch /tmp/fp8ds.json
  done
done
TAIL=0 phase gaps_bf16 60 python3 scripts/launch_gaps.py --seq 8192 --calls 3
TAIL=6 phase table_32k 200 python3 scripts/bench_attention.py --seqs 32768 --dims 128 --presets fp8 --peers cudnn \
  --modes fwdbwd --rounds 3 --launch /tmp/fp8ds.json --out /tmp/results/bench_32k
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep -E "dq_from_ds|dkdv_ws|dq_row_scale|key_copies" "$f"; done
tar -czf "$OUT/results.tar.gz" -C /tmp results
