#!/usr/bin/env bash
# Session 11, closing call: the speed table with every peer at 8k / 16k / 32k under the new default timing
# (single calls alternating between the implementations), then the GPU tier of test_attention_gpu.py.
set -uo pipefail
source scripts/device/setup.sh
TAIL=22 phase bench 240 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --rounds 3 --out "$R/bench"
TAIL=6 phase tests_attn 330 $GPU_TESTS tests/test_attention_gpu.py
tar -czf "$OUT/results.tar.gz" -C /tmp results
