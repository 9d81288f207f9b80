#!/usr/bin/env bash
# Session 16, last call: the ws dK/dV kernel at four stages (the default now): its GPU tests (against the fused
# Gluon kernel, bit for bit; the Gluon backward's causal prefix tests), then the speed table.
#   bash scripts/device/session16_final.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=12 phase tests_dkdv 200 $GPU_TESTS tests/test_attention_gpu.py -k "ws_dkdv or gluon_dkdv or accuracy"
TAIL=4 phase tests_causal 150 $GPU_TESTS tests/test_causal_safety.py -k gluon_backward
TAIL=24 phase bench 330 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --rounds 3 --out "$R/bench"
tar -czf "$OUT/results.tar.gz" -C /tmp results
