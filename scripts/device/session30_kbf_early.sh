#!/usr/bin/env bash
# Session 30, call 6 (~4 minutes): fold_k with K's bf16 rows (KBF) written at the program's start instead of where
# the copy is re-quantized, against HEAD's fold_k (.gpu/base: git archive d36d17e kernels), the same call.
#   1. the fold_k bit-identity tests on this tree;
#   2. scripts/launch_gaps.py at 8k, base and this tree in turn, three rounds (`gaps_vs_base`);
#   bash scripts/device/session30_kbf_early.sh
set -uo pipefail
source scripts/device/setup.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TAIL=0 phase fold_tests 120 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  -k "fold_k"
grep -E "PASSED|FAILED|ERROR|bit-identical" "$R/fold_tests.log" | tail -8
gaps_vs_base 3 "_dkdv_ws_kernel\|per call"
tar -czf "$OUT/results.tar.gz" -C /tmp results
