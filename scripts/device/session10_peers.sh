#!/usr/bin/env bash
# Session 10: does the peer list change our timings? The same 8k table twice, cuDNN alone as a peer and then
# cuDNN, flash SDPA and FlexAttention (session10_bench.sh read the fp8 forward at 1.75 ms where tables with
# cuDNN alone read 1.58), and the forward's host enqueue time with and without a compiled FlexAttention.
set -uo pipefail
source scripts/device/setup.sh
B="python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --rounds 3"
TAIL=6 phase bench_cudnn 120 $B --peers cudnn --out "$R/cudnn"
TAIL=10 phase bench_all 200 $B --peers cudnn,flash,flex --out "$R/all"
TAIL=6 phase bench_cudnn_again 120 $B --peers cudnn --out "$R/cudnn2"
tar -czf "$OUT/results.tar.gz" -C /tmp results
