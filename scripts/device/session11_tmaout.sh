#!/usr/bin/env bash
# Session 11: the Gluon forward writing O and O8 through shared memory by TMA (TMA_OUT) against its per-thread
# stores: the forward's GPU tests (bit-identity with the Triton kernel, the fused Q, the causal prefix tests), then
# per-kernel times at S = 8k, interleaved.
set -uo pipefail
source scripts/device/setup.sh
W="python3 scripts/device/with_constants.py"
TAIL=6 phase tests_fwd 200 $GPU_TESTS tests/test_attention_gpu.py -k "gluon_forward or fused_q or deferred"
TAIL=4 phase tests_causal 90 $GPU_TESTS tests/test_causal_safety.py -k gluon
for round in 1 2; do
  TAIL=1 phase "gaps_stores_$round" 60 $W attention_fwd_gluon.TMA_OUT=False -- scripts/launch_gaps.py --seq 8192
  TAIL=1 phase "gaps_tma_$round" 60 python3 scripts/launch_gaps.py --seq 8192
done
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep "_fwd_gluon\|per call" "$f"; done
tar -czf "$OUT/results.tar.gz" -C /tmp results
