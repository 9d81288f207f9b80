#!/usr/bin/env bash
# Session 10's confirmation, call 2 of 2: the speed table, every implementation timed in three interleaved
# rounds (bench_attention --rounds), fp8 against cuDNN, flash SDPA and FlexAttention at S = 8k, 16k, 32k.
set -uo pipefail
source scripts/device/setup.sh
TAIL=30 phase bench 560 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --rounds 3 --out "$R/bench"
tar -czf "$OUT/results.tar.gz" -C /tmp results
