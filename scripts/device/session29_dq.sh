#!/usr/bin/env bash
# Session 29, call 1: `dq_from_ds` read by TMA (dq_from_ds.TMA) against the thread loads, over both dS buffers, with
# its dQ bit-identity; then the GPU checks session 28 left un-run (dsk=fp8's dQ bar in test_gpu_triton_matches_reference,
# the prefix tests of fp8-dsk) and the ds_out tests with TMA on.
#   bash scripts/device/session29_dq.sh
set -uo pipefail
source scripts/device/setup.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
WC="python3 scripts/device/with_constants.py"
TAIL=40 phase probe 200 python3 scripts/device/dq_from_ds_probe.py --rounds 3
TAIL=8 phase tests_tol 150 $GPU_TESTS tests/test_attention_gpu.py -k "triton_matches_reference or ds_out or fp8_ds"
TAIL=8 phase tests_tma 120 $WC dq_from_ds.TMA=True -- $GPU_TESTS_ARGS tests/test_attention_gpu.py -k "ds_out"
TAIL=8 phase tests_prefix 150 $GPU_TESTS tests/test_causal_safety.py -k "fp8-dsk or fp8_dsk"
tar -czf "$OUT/results.tar.gz" -C /tmp results
