#!/usr/bin/env bash
# Session 9: the Gluon dQ kernel with its products waited for per sub-tile, three programs per SM (launch
# option gluon_dq: key sub-tiles of 64, or 32 with :gluondq32) — its agreement with the Triton dQ kernel,
# then the backward's dQ alone (with the copies) under each, interleaved, at S = 8k.
#   bash scripts/device/session9_dq.sh
set -uo pipefail
source scripts/device/setup.sh
TAIL=8 phase tests 90 $GPU_TESTS tests/test_attention_gpu.py -k "gluon_dq"
C=4x3x32:bm64:pre:dq,4x3x32:bm64:pre:gluondq:dq,4x3x32:bm64:pre:gluondq32:dq
TAIL=14 phase profile 90 python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd --profile --bwd-configs $C,$C --out "$R/profile"
tar -czf "$OUT/results.tar.gz" -C /tmp results
