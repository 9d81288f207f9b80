#!/usr/bin/env bash
# Session 19: the speed table at 8k and 16k against cuDNN at this commit (the backward's launches through Relaunch).
#   bash scripts/device/session19_table.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=20 phase table 400 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --rounds 3 --out "$R/alternating"
tar -czf "$OUT/results.tar.gz" -C /tmp results
