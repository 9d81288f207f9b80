#!/usr/bin/env bash
# Session 28, call 4: the preset fp8-dsk (fp8 with its dQ product in FP8, spec part dsk=fp8) on the GPU tier: the
# Triton kernels and the fast path against the reference, accuracy against fp32 at S = 4096, the causal prefix tests.
#   bash scripts/device/session28_dsk_tests.sh
set -uo pipefail
source scripts/device/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
TAIL=0 phase tests 200 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py -k "fp8-dsk or fp8_ds_out"
grep -E "PASSED|FAILED|ERROR|rel-L2|cosine|passed|failed" "$R/tests.log" | cut -c1-400
tar -czf "$OUT/results.tar.gz" -C /tmp results
