#!/usr/bin/env bash
# Session 25, third call: ds_out's two stores and loads, variants against the default — the dK/dV kernel's dS pairs
# straight to global memory (attention_dkdv_ws.DS_DIRECT) instead of a shared tile and a TMA store, and dq_from_ds's
# dS loads marked evict_first (dq_from_ds.Y_EVICT): bits (GPU tests under each), kernel times (launch_gaps at 8k,
# dq_from_ds_probe) and fwd+bwd against cuDNN (bench calls in turn, two rounds).
#   bash scripts/device/session25_variants.sh      # at 4330db0 (both switches were dropped after it)
set -uo pipefail
source scripts/device/setup.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
WC="python3 scripts/device/with_constants.py"
DIRECT="attention_dkdv_ws.DS_DIRECT=True"
EVICT="dq_from_ds.Y_EVICT='evict_first'"
TAIL=10 phase tests 300 $GPU_TESTS tests/test_attention_gpu.py tests/test_causal_safety.py -k "ds_out or gluon_backward"
TAIL=6 phase tests_direct 200 $WC "$DIRECT" "$EVICT" -- $GPU_TESTS_ARGS tests/test_attention_gpu.py -k ds_out
TAIL=8 phase probe 120 python3 scripts/device/dq_from_ds_probe.py
TAIL=14 phase gaps_default 120 python3 scripts/launch_gaps.py --seq 8192 --calls 3
TAIL=14 phase gaps_direct 120 $WC "$DIRECT" -- scripts/launch_gaps.py --seq 8192 --calls 3
B="scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 --peers cudnn --modes fwdbwd --rounds 3"
for round in 1 2; do
  TAIL=5 phase "table_default_$round" 150 python3 $B --out "/tmp/results/bench_default_$round"
  TAIL=5 phase "table_direct_$round" 150 $WC "$DIRECT" -- $B --out "/tmp/results/bench_direct_$round"
  TAIL=5 phase "table_evict_$round" 150 $WC "$EVICT" -- $B --out "/tmp/results/bench_evict_$round"
done
tar -czf "$OUT/results.tar.gz" -C /tmp results
