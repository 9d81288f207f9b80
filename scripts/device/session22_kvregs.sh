#!/usr/bin/env bash
# Session 22: the warp-specialized dK/dV kernel with K's (KV_REGS=1) or V's (2) rows as the Sᵀ / dPᵀ products'
# A operand from registers instead of shared memory. Those products are m64n32k32 wgmmas whose A (64 × 32 bytes)
# and B (32 × 32) come from shared memory: per sub-tile 36 KB of operand reads plus the ring's 20.6 KB of TMA
# writes against ~320 tensor-core cycles, so shared memory may be what sets the pace; with one A in registers a
# sub-tile reads 8 KB less. sm_90 SASS (CPU): off-diagonal loop 332 -> 334 instructions, nothing spilled there (both
# K and V spill 24 registers in it, so not tried). First the bits (the ws kernel against the fused Gluon one), then
# the kernel's time in torch.profiler traces, variants in turn, three rounds at 8k and one at 16k.
#   bash scripts/device/session22_kvregs.sh   (carry .gpu; at a054d19, where the probe exists — reverted in d1f64d9)
set -uo pipefail
source scripts/device/setup.sh
WC="python3 scripts/device/with_constants.py"
for v in 1 2; do
  TAIL=6 phase "bits_$v" 200 $WC attention_dkdv_ws.KV_REGS=$v -- $GPU_TESTS_ARGS tests/test_attention_gpu.py \
    -k "ws_dkdv_matches"
done
for round in 1 2 3; do
  for v in 0 1 2; do
    TAIL=1 phase "gaps8_${v}_$round" 60 $WC attention_dkdv_ws.KV_REGS=$v -- scripts/launch_gaps.py --seq 8192
  done
done
for v in 0 1 2; do
  TAIL=1 phase "gaps16_$v" 60 $WC attention_dkdv_ws.KV_REGS=$v -- scripts/launch_gaps.py --seq 16384
done
for f in "$R"/gaps*.log; do echo "== $(basename "$f") $(grep -E "_dkdv_ws_kernel|_dq_gluon_kernel|per call" "$f" | tr -s ' ' | cut -c1-60 | tr '\n' ' ')"; done
tar -czf "$OUT/results.tar.gz" -C /tmp results
