#!/usr/bin/env bash
# Session 29, call 2: the speed table at this tree's defaults (fp8 and fp8-dsk beside cuDNN and flash SDPA at 8k /
# 16k / 32k), kernel times at 8k for both presets, then the GPU tier's backward tests (ds_out, the dQ kernels, the
# prefix tests) time-boxed.
#   bash scripts/device/session29_table.sh
set -uo pipefail
source scripts/device/setup.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TAIL=40 phase table 240 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;fp8-dsk" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/bench
echo '{"bwd": {"fp8_dq": true}}' > /tmp/dsk.json
TAIL=0 phase gaps_fp8 60 python3 scripts/launch_gaps.py --seq 8192 --calls 3
TAIL=0 phase gaps_dsk 60 python3 scripts/launch_gaps.py --seq 8192 --calls 3 --launch /tmp/dsk.json
grep -E "dq_from_ds|dkdv_ws|per call" "$R"/gaps_*.log
TAIL=0 phase tests 200 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py -k "ds_out or fp8_ds or gluon_backward or prefix or side_stream or relaunch"
grep -E "PASSED|FAILED|ERROR" "$R/tests.log" | grep -oE "PASSED|FAILED|ERROR" | sort | uniq -c
grep -E "^(FAILED|ERROR)|passed|failed" "$R/tests.log" | tail -25
tar -czf "$OUT/results.tar.gz" -C /tmp results
