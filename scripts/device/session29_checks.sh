#!/usr/bin/env bash
# Session 29, call 2: the GPU checks call 1's time box cut off — the fp8 dS buffer against the reference at fp8-dsk's
# default launch, the causal prefix tests of fp8-dsk (plain, Gluon forward, launch options) and of the Gluon backward
# over the fp8 buffer — and, on an H200, dq_from_ds's TMA probe again (call 1 ran on an H100).
#   bash scripts/device/session29_checks.sh
set -uo pipefail
source scripts/device/setup.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
if [[ "$card" == *H200* ]]; then TAIL=30 phase probe 60 python3 scripts/device/dq_from_ds_probe.py --rounds 3; fi
TAIL=0 phase tests 270 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py -k "fp8_ds_out or (prefix and fp8-dsk) or (gluon_backward and fp8)"
grep -E "PASSED|FAILED|ERROR" "$R/tests.log" | sed -E 's/ (PASSED|FAILED|ERROR).*/ \1/' | tail -40
grep -E "^(FAILED|ERROR)|passed|failed" "$R/tests.log" | tail -10
tar -czf "$OUT/results.tar.gz" -C /tmp results
