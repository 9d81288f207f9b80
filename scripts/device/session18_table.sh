#!/usr/bin/env bash
# Session 18: the speed table at this commit, timed both ways: single calls as the table has always been timed
# (the host's time counts where the GPU waits for it) and the same calls with the host ahead (GPU time alone).
#   bash scripts/device/session18_table.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=30 phase table 300 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --rounds 3 --out "$R/alternating"
TAIL=30 phase table_ahead 200 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn --rounds 3 --timing ahead --out "$R/ahead"
tar -czf "$OUT/results.tar.gz" -C /tmp results
