#!/usr/bin/env bash
# Session 22's review: the causal prefix tests' GPU tier and the kernel-vs-reference comparison at the final kernels
# (4e87d46's dK/dV loop; session22_final.sh ran them at fc508af, before it).
#   bash scripts/device/session22_check.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=4 phase causal 150 $GPU_TESTS tests/test_causal_safety.py
TAIL=14 phase reference 140 $GPU_TESTS tests/test_attention_gpu.py -k "triton_matches_reference and 128"
tar -czf "$OUT/results.tar.gz" -C /tmp results
