#!/usr/bin/env bash
# Session 21: the speed table at 32k (last taken at 6900581, session 18, before the dQ side stream and τ's launch).
#   bash scripts/device/session21_32k.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=14 phase table 240 python3 scripts/bench_attention.py --seqs 32768 --dims 128 --presets fp8 \
  --peers cudnn --rounds 3 --out "$R/table"
tar -czf "$OUT/results.tar.gz" -C /tmp results
