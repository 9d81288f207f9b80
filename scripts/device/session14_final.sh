#!/usr/bin/env bash
# Session 14, last call: the warp-specialized forward's GPU tests with the ping-pong off by default (the variants'
# matrix now centred on it), the non-finite future key test, and the Gluon causal-safety tests of the defaults.
#   bash scripts/device/session14_final.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=8 phase tests_ws 300 $GPU_TESTS tests/test_attention_gpu.py -k "ws_forward or future_non_finite"
TAIL=4 phase tests_causal 200 $GPU_TESTS tests/test_causal_safety.py -k gluon
tar -czf "$OUT/results.tar.gz" -C /tmp results
