#!/usr/bin/env bash
# Session 29, call 1: `dq_from_ds` read by TMA (dq_from_ds.TMA) against the thread loads, over both dS buffers, with
# its dQ bit-identity; with TMA on, the GPU checks session 28 left un-run (dsk=fp8's dQ bar in
# test_gpu_triton_matches_reference, the prefix tests of fp8-dsk), the ds_out tests, and fwd / fwd+bwd at 8k / 16k
# against cuDNN.
#   bash scripts/device/session29_dq.sh
set -uo pipefail
source scripts/device/setup.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
WC="python3 scripts/device/with_constants.py dq_from_ds.TMA=True --"
TAIL=30 phase probe 150 python3 scripts/device/dq_from_ds_probe.py --rounds 3
TAIL=8 phase tests 170 $WC $GPU_TESTS_ARGS tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "triton_matches_reference or ds_out or fp8_ds or fp8-dsk or fp8_dsk"
TAIL=30 phase table 200 $WC scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets "fp8;fp8-dsk" \
  --peers cudnn --modes fwd,fwdbwd --rounds 3 --out /tmp/results/bench
tar -czf "$OUT/results.tar.gz" -C /tmp results
