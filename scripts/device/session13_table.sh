#!/usr/bin/env bash
# Session 13, second call: the speed table at the chained forward's block-scale prefetch (every peer at 8k / 16k /
# 32k, single calls alternating between the implementations), and the GPU tier of the forward's launch tests.
set -uo pipefail
source scripts/device/setup.sh
TAIL=22 phase bench 300 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --rounds 3 --out "$R/bench"
TAIL=4 phase tests_launch 200 $GPU_TESTS tests/test_attention_gpu.py -k "launch or accuracy_vs_exact"
tar -czf "$OUT/results.tar.gz" -C /tmp results
