#!/usr/bin/env bash
# Session 11, last call: the speed table at the final commit (the forward's TMA epilogue included), fp8 against
# cuDNN at 8k / 16k / 32k, calls alternating between the two.
set -uo pipefail
source scripts/device/setup.sh
TAIL=12 phase bench 200 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn --rounds 3 --out "$R/bench"
tar -czf "$OUT/results.tar.gz" -C /tmp results
