#!/usr/bin/env bash
# Session 24: the costs a dQ fused into the dK/dV kernel would add — fp32 atomic additions of dQᵀ tiles from the
# wgmma accumulator's layout and as TMA reduce-adds (scripts/device/fused_dq_probe.py atomics), as bulk reduces
# (scripts/device/bulk_reduce_probe.cu, built beside this call: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o
# .gpu/bulk_reduce_probe scripts/device/bulk_reduce_probe.cu; .gpu travels in carry), the ws dK/dV kernel on 128-key
# programs alone (fused_dq_probe.py ws128) — then today's speed table of the default against cuDNN at 8k and 16k.
#   bash scripts/device/session24_probe.sh
set -uo pipefail
source scripts/device/setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv
TAIL=20 phase atomics 120 python3 scripts/device/fused_dq_probe.py atomics
TAIL=4 phase bulk 60 .gpu/bulk_reduce_probe 8192 64
TAIL=8 phase ws128 240 python3 scripts/device/fused_dq_probe.py ws128
TAIL=14 phase table 300 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 --peers cudnn \
  --rounds 3 --out /tmp/results/bench
tar -czf "$OUT/results.tar.gz" -C /tmp results
