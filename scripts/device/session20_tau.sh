#!/usr/bin/env bash
# Session 20: τ of the FP8 dV product in one Triton launch (kernels/dv_row_scale.py) instead of four PyTorch kernels:
# its bits against the reference on the GPU, the backward's bit-identity tests, one call's kernels at 8k, and the
# fwd+bwd speed table at 8k and 16k.
#   bash scripts/device/session20_tau.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=8 phase gpu_tests 150 $GPU_TESTS tests/test_dv_row_scale.py tests/test_attention_gpu.py -k "suffix_max or side_stream or relaunch"
TAIL=24 phase gaps8 90 python3 scripts/launch_gaps.py --seq 8192 --calls 3
TAIL=10 phase table 150 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --modes fwdbwd --rounds 3 --out "$R/table"
tar -czf "$OUT/results.tar.gz" -C /tmp results
