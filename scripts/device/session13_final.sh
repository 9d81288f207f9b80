#!/usr/bin/env bash
# Session 13, closing call: the GPU tier of the attention tests and the causal prefix tests at the final commit
# (its kernels are 51a9c46's: the chained forward's block-scale prefetch; the barrier rings reverted).
set -uo pipefail
source scripts/device/setup.sh
TAIL=6 phase tests_attn 380 $GPU_TESTS tests/test_attention_gpu.py
TAIL=4 phase tests_causal 150 $GPU_TESTS tests/test_causal_safety.py
tar -czf "$OUT/results.tar.gz" -C /tmp results
