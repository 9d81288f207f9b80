#!/usr/bin/env bash
# Session 37, call 2: session37_call1.sh cut to what ~8 minutes of device time hold (call 1 never got a machine): the
# issue's table, the new bit test with the fp8 prefix tests through the Gluon forward, one round of the A/B at 8k
# (launch_gaps.py: the defaults, without the pin, with SPLIT_BARRIERS).
#   bash scripts/device/session37_call2.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=40 phase table 240 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
TAIL=12 phase tests 150 $GPU_TESTS tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "pinned_rescale_and_split or (prefix_gpu and gluon_forward) or gluon_forward_matches"
save
TAIL=0 phase gaps_pin 60 python3 scripts/launch_gaps.py --seq 8192
TAIL=0 phase gaps_nopin 60 python3 scripts/device/with_constants.py attention_fwd_gluon.PIN_RESCALE=False \
  -- scripts/launch_gaps.py --seq 8192
TAIL=0 phase gaps_split 60 python3 scripts/device/with_constants.py attention_fwd_gluon.SPLIT_BARRIERS=True \
  -- scripts/launch_gaps.py --seq 8192
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep -E "per call|_kernel|^[a-z].*:" "$f" | head -16; done
save
