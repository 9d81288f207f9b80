#!/usr/bin/env bash
# Session 35: the issue's table alone at the session's defaults (0ece108's kernels), for an H200 if one comes.
#   bash scripts/device/session35_h200_table.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=40 phase table 240 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
