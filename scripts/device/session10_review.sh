#!/usr/bin/env bash
# Session 10's review: the Gluon backward kernels after their shared helpers (acdf453; sm_90 SASS identical)
# and the GPU tests' spy — the Gluon-vs-Triton tests and the causal prefix tests on the Gluon kernels.
set -uo pipefail
source scripts/device/setup.sh
TAIL=8 phase tests_gluon 120 $GPU_TESTS tests/test_attention_gpu.py -k "gluon_dkdv or gluon_dq or deferred_copies"
TAIL=4 phase tests_causal 90 $GPU_TESTS tests/test_causal_safety.py -k gluon
tar -czf "$OUT/results.tar.gz" -C /tmp results
