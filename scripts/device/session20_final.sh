#!/usr/bin/env bash
# Session 20: the dQ kernel on a high-priority side stream as the fast path's default (dq_stream). GPU tests (the
# side stream's bits, every relaunched launch, the backward kernels, the causal prefix tests' GPU tier), then the
# speed table at 8k and 16k against cuDNN.
#   bash scripts/device/session20_final.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=12 phase gpu_tests 240 $GPU_TESTS tests/test_attention_gpu.py -k "side_stream or relaunch or ws_dkdv or gluon_dq or accuracy_vs_exact"
TAIL=6 phase causal 240 $GPU_TESTS tests/test_causal_safety.py
TAIL=20 phase table 300 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --rounds 3 --out "$R/table"
tar -czf "$OUT/results.tar.gz" -C /tmp results
