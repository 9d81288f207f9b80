#!/usr/bin/env bash
# Session 24, first call: the two costs a dQ fused into the dK/dV kernel would add (scripts/device/fused_dq_probe.py:
# fp32 atomic additions of dQᵀ tiles from the wgmma accumulator's layout; the ws dK/dV kernel on 128-key programs),
# then today's speed table of the default against cuDNN at 8k and 16k.
#   bash scripts/device/session24_probe.sh
set -uo pipefail
source scripts/device/setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv
TAIL=20 phase atomics 120 python3 scripts/device/fused_dq_probe.py atomics
TAIL=8 phase ws128 240 python3 scripts/device/fused_dq_probe.py ws128
TAIL=14 phase table 300 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 --peers cudnn \
  --rounds 3 --out /tmp/results/bench
tar -czf "$OUT/results.tar.gz" -C /tmp results
