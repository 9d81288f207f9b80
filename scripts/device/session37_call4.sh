#!/usr/bin/env bash
# Session 37, call 4: ~5 minutes of device time left: the issue's two lengths of the table, the pin's bit test, the
# no_grad forward's kernels at 8k with the pin and without.
#   bash scripts/device/session37_call4.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=30 phase table 120 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 \
  --presets "fp8" --peers cudnn --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
TAIL=0 phase gaps_pin 45 python3 scripts/launch_gaps.py --seq 8192
TAIL=0 phase gaps_nopin 45 python3 scripts/device/with_constants.py attention_fwd_gluon.PIN_RESCALE=False \
  -- scripts/launch_gaps.py --seq 8192
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep -E "per call|_kernel|^[a-z].*:" "$f" | head -16; done
save
TAIL=6 phase tests 60 $GPU_TESTS tests/test_attention_gpu.py -k "pinned_rescale_and_split"
save
