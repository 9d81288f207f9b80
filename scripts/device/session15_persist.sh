#!/usr/bin/env bash
# Session 15: the warp-specialized forward's persistent grid (one program per SM over the work items) with the O8 /
# Q8 byte stores that ptxas no longer miscompiles (attention_fwd_gluon._store_e4m3): its GPU tests against the chained
# kernel (pre-pass and fused Q, non-finite rows, a future non-finite key, fwd + bwd), then its time against the
# default, the per-item ws grid and cuDNN (interleaved rounds). Second call: the grid dealt in snake order.
#   bash scripts/device/session15_persist.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=30 phase tests_ws 300 $GPU_TESTS tests/test_attention_gpu.py -k "ws_forward or future_non_finite or fused_q"
TAIL=24 phase ab 240 python3 scripts/ab_forward.py --seqs 8192 16384 --rounds 3 \
  --variants default ws ws+persist ws+persist+ws4
tar -czf "$OUT/results.tar.gz" -C /tmp results
