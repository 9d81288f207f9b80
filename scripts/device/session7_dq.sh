#!/usr/bin/env bash
# Session 7's last device call (1× H200, ~120 s): the sm_90 Gluon dQ kernel (launch option gluon_dq)
# against the Triton dQ kernel, and both timed alone at S = 8k.
#   bash scripts/device/session7_dq.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
TAIL=8 phase tests 50 python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py -k "gluon_dq"
TAIL=6 phase profile 40 python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd --profile --bwd-configs 4x3x32:bm64:pre:dq,4x3x32:bm64:pre:gluondq:dq --out "$R/profile"
tar -czf "$OUT/results.tar.gz" -C /tmp results
