#!/usr/bin/env bash
# Session 32, call 9 (one call, ~2 minutes): the table at the session's last kernel commit: 8k / 16k / 32k,
# fwd and fwd+bwd, `fp8` and `fp8-bf16dq` against cuDNN and flash, three rounds.
#   bash scripts/device/session32_call9.sh            (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=30 phase table 150 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
