#!/usr/bin/env bash
# Session 25, second call: launch option ds_out as the fast path's default (a 5 GiB workspace, chunks of K / V heads):
# the GPU tiers it touches, dq_from_ds's launch against the card's copy bandwidth, then the speed table with it
# (the default) and without ({"bwd": {"ds_out": 0}}), bench calls in turn, and fwd+bwd at 32k (four chunks).
#   bash scripts/device/session25_default.sh
set -uo pipefail
source scripts/device/setup.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
TAIL=14 phase tests 420 $GPU_TESTS tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "ds_out or side_stream or ws_dkdv or gluon_dq or fp8_ds or relaunch or triton_matches_reference or prefix or leak or safe"
TAIL=8 phase probe 120 python3 scripts/device/dq_from_ds_probe.py
echo '{"bwd": {"ds_out": 0}}' > /tmp/off.json
for round in 1 2; do
  TAIL=10 phase "table_$round" 150 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
    --peers cudnn --rounds 3 --out "/tmp/results/bench_$round"
  TAIL=6 phase "table_off_$round" 150 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
    --peers cudnn --modes fwdbwd --rounds 3 --launch /tmp/off.json --out "/tmp/results/bench_off_$round"
done
TAIL=6 phase table_32k 200 python3 scripts/bench_attention.py --seqs 32768 --dims 128 --presets fp8 \
  --peers cudnn --modes fwdbwd --rounds 3 --launch /tmp/off.json --out /tmp/results/bench_32k
tar -czf "$OUT/results.tar.gz" -C /tmp results
