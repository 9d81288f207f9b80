#!/usr/bin/env bash
# Session 37, call 3: the last of the session's device time (calls 1 and 2 got no machine, or lost it): the issue's
# table, the new bit test and the fp8 prefix tests through the Gluon forward, then the no_grad forward's kernels at
# 8k with the pin and without (launch_gaps.py).
#   bash scripts/device/session37_call3.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=40 phase table 200 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8" --peers cudnn --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
TAIL=8 phase tests 120 $GPU_TESTS tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "pinned_rescale_and_split or (prefix_gpu and gluon_forward)"
save
TAIL=0 phase gaps_pin 50 python3 scripts/launch_gaps.py --seq 8192
TAIL=0 phase gaps_nopin 50 python3 scripts/device/with_constants.py attention_fwd_gluon.PIN_RESCALE=False \
  -- scripts/launch_gaps.py --seq 8192
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep -E "per call|_kernel|^[a-z].*:" "$f" | head -16; done
save
