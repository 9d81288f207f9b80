#!/usr/bin/env bash
# Session 17: the ws dK/dV kernel with its dK product in FP8 under bound scales (launch option fp8_dk, a probe):
# the default kernels' GPU tests after the shared sub-tile code grew the FP8_DK branch (the same bits expected), then
# scripts/dk_fp8_probe.py (accuracy against the reference's math and fp32, kernel time against bf16 dK).
#   bash scripts/device/session17_fp8dk.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=6 phase tests_dkdv 240 $GPU_TESTS tests/test_attention_gpu.py -k "ws_dkdv or gluon_dkdv or accuracy"
TAIL=30 phase probe 300 python3 scripts/dk_fp8_probe.py --seqs 8192 16384 --rounds 3
tar -czf "$OUT/results.tar.gz" -C /tmp results
