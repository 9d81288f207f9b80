#!/usr/bin/env bash
# Session 24: the ws dK/dV kernel's off-diagonal loop over groups of sub-tiles (launch option dkdv_group, each
# sub-tile's dV and dK in flight during the next one's elementwise work) against its one-sub-tile loop: the kernel
# alone and bit for bit (scripts/device/dkdv_group_probe.py), then fwd+bwd against cuDNN with and without (bench
# calls in turn). On an H200, also the dQ additions' costs of session24_probe.sh (first measured on an H100).
#   bash scripts/device/session24_groups.sh      # at 89c2aff (the launch option was reverted after it)
set -uo pipefail
source scripts/device/setup.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
TAIL=12 phase groups 300 python3 scripts/device/dkdv_group_probe.py
echo '{"bwd": {"dkdv_group": 2}}' > /tmp/g2.json
for round in 1 2; do
  TAIL=6 phase "table_default_$round" 120 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
    --peers cudnn --modes fwdbwd --rounds 3 --out "/tmp/results/bench_default_$round"
  TAIL=6 phase "table_g2_$round" 120 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
    --peers cudnn --modes fwdbwd --rounds 3 --launch /tmp/g2.json --out "/tmp/results/bench_g2_$round"
done
if [[ $card == *H200* ]]; then
  TAIL=12 phase atomics 120 python3 scripts/device/fused_dq_probe.py atomics
  TAIL=4 phase bulk 60 .gpu/bulk_reduce_probe 8192 64
fi
tar -czf "$OUT/results.tar.gz" -C /tmp results
