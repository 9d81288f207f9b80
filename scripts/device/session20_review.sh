#!/usr/bin/env bash
# Session 20 review: after the backward's side-stream context was simplified, its GPU tests, τ's, the relaunch
# bit-identity test and the causal prefix tests' GPU tier.
#   bash scripts/device/session20_review.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=6 phase gpu_tests 150 $GPU_TESTS tests/test_dv_row_scale.py tests/test_attention_gpu.py -k "suffix_max or side_stream or relaunch"
TAIL=4 phase causal 240 $GPU_TESTS tests/test_causal_safety.py
tar -czf "$OUT/results.tar.gz" -C /tmp results
