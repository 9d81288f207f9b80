#!/usr/bin/env bash
# Session 17: the GPU test of the FP8 dS probes against the reference, and the Gluon backward's causal prefix tests
# (the default kernels, whose shared sub-tile code grew the FP8_DK / FP8_DQ branches).
#   bash scripts/device/session17_tests.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=6 phase tests_probes 200 $GPU_TESTS tests/test_attention_gpu.py -k "fp8_ds_probes"
TAIL=4 phase tests_causal 200 $GPU_TESTS tests/test_causal_safety.py -k gluon_backward
tar -czf "$OUT/results.tar.gz" -C /tmp results
