#!/usr/bin/env bash
# Session 27: the fp8 dS buffer (launch options ds_out with fp8_dq), whose dQ the GPU tests of session 26's code found
# NaN / far off. Its stages one by one (scripts/device/fp8_ds_stages_probe.py) with the E4M3 pairs packed by one cvt
# each; the GPU tests; kernel times at 8k, default and fp8 dS; then the speed table at 8k / 16k.
#   bash scripts/device/session27_fp8ds.sh
set -uo pipefail
source scripts/device/setup.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
echo '{"bwd": {"fp8_dq": true, "ds_fp8": true}}' > /tmp/fp8ds.json
TAIL=40 phase stages_new 120 python3 scripts/device/fp8_ds_stages_probe.py
TAIL=12 phase tests 240 $GPU_TESTS tests/test_attention_gpu.py tests/test_causal_safety.py -k "fp8_ds or gluon_backward"
TAIL=0 phase gaps_new 70 python3 scripts/launch_gaps.py --seq 8192 --calls 3 --launch /tmp/fp8ds.json
TAIL=0 phase gaps_default 70 python3 scripts/launch_gaps.py --seq 8192 --calls 3
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep -E "dq_from_ds|dkdv_ws|dq_row_scale|key_copies|per call" "$f"; done
TAIL=10 phase table 150 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --modes fwdbwd --rounds 2 --launch /tmp/fp8ds.json --out /tmp/results/bench
tar -czf "$OUT/results.tar.gz" -C /tmp results
