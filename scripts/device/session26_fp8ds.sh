#!/usr/bin/env bash
# Session 26: the dS buffer in E4M3 (launch options ds_out with fp8_dq). Its GPU tests (against the reference's FP8
# dQ math, as the Gluon dQ kernel's fp8_dq probe; ds_out's bits as before; the Gluon backward's prefix tests, this path
# included), the accuracy at S = 4096 against fp32, kernel times at 8k (launch_gaps, default and fp8 dS), then the
# speed table with the fp8 dS rows beside the default's and cuDNN's.
#   bash scripts/device/session26_fp8ds.sh
set -uo pipefail
source scripts/device/setup.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
echo '{"bwd": {"fp8_dq": true, "ds_fp8": true}}' > /tmp/fp8ds.json
TAIL=12 phase tests 240 $GPU_TESTS tests/test_attention_gpu.py tests/test_causal_safety.py -k "ds_out or fp8_ds or gluon_backward"
TAIL=12 phase accuracy 90 python3 scripts/device/fp8_ds_out_probe.py
TAIL=30 phase gaps_default 70 python3 scripts/launch_gaps.py --seq 8192 --calls 3
TAIL=40 phase gaps_fp8ds 70 python3 scripts/launch_gaps.py --seq 8192 --calls 3 --launch /tmp/fp8ds.json
for round in 1; do
  TAIL=10 phase "table_$round" 150 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
    --peers cudnn --modes fwdbwd --rounds 3 --launch /tmp/fp8ds.json --out "/tmp/results/bench_$round"
done
tar -czf "$OUT/results.tar.gz" -C /tmp results
