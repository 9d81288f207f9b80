#!/usr/bin/env bash
# Session 16: the dK/dV GPU tests after their dV tolerance was set from session16_fp8dv.sh's measurement.
#   bash scripts/device/session16_retest.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=20 phase tests_dkdv 240 $GPU_TESTS tests/test_attention_gpu.py -k "gluon_dkdv or atomic_dq or ws_dkdv"
tar -czf "$OUT/results.tar.gz" -C /tmp results
