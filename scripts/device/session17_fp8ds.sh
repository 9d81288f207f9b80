#!/usr/bin/env bash
# Session 17: the dK and dQ products in FP8 under bound scales (launch options fp8_dk, fp8_dq, probes):
# the default kernels' GPU tests after the shared sub-tile code grew the FP8_DK and FP8_DQ branches (the same bits expected), then
# scripts/ds_fp8_probe.py (accuracy against the reference's math and fp32, kernel times against bf16 dS products).
#   bash scripts/device/session17_fp8ds.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=6 phase tests_dkdv 240 $GPU_TESTS tests/test_attention_gpu.py -k "ws_dkdv or gluon_dkdv or gluon_dq or accuracy or deferred"
TAIL=30 phase probe 300 python3 scripts/ds_fp8_probe.py --seqs 8192 16384 --rounds 3
tar -czf "$OUT/results.tar.gz" -C /tmp results
