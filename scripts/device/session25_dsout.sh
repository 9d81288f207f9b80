#!/usr/bin/env bash
# Session 25: launch option ds_out (the ws dK/dV kernel stores dS·s_k in bf16, `dq_from_ds` multiplies it by K in
# place of the dQ kernel's S, dP, P and dS again): its bits against the default (GPU test), where each kernel's time
# goes (launch_gaps at 8k, both launches), then fwd+bwd against cuDNN with and without it (bench calls in turn).
#   bash scripts/device/session25_dsout.sh      # at eb8d4c2 (ds_out took True then; since 6141dbb it takes a byte budget)
set -uo pipefail
source scripts/device/setup.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
TAIL=8 phase test 300 $GPU_TESTS tests/test_attention_gpu.py -k "ds_out or dq_on_a_side_stream"
echo '{"bwd": {"ds_out": true}}' > /tmp/ds.json
TAIL=40 phase gaps_default 120 python3 scripts/launch_gaps.py --seq 8192 --calls 3
TAIL=40 phase gaps_dsout 120 python3 scripts/launch_gaps.py --seq 8192 --calls 3 --launch /tmp/ds.json
for round in 1 2; do
  TAIL=6 phase "table_default_$round" 150 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
    --peers cudnn --modes fwdbwd --rounds 3 --out "/tmp/results/bench_default_$round"
  TAIL=6 phase "table_dsout_$round" 150 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
    --peers cudnn --modes fwdbwd --rounds 3 --launch /tmp/ds.json --out "/tmp/results/bench_dsout_$round"
done
tar -czf "$OUT/results.tar.gz" -C /tmp results
