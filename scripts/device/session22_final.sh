#!/usr/bin/env bash
# Session 22's last call: the GPU tiers that go through the Q pre-pass and the token-block requantization (changed in
# 73bf88a: D a constexpr) — the causal prefix tests (the leaky variant's token-block Q, the D = 64 Triton path), the
# pre-pass and fused-Q comparisons and the launch variants — then Nsight Compute's stall samples per SASS line of the
# warp-specialized dK/dV kernel at 8k (where its consumer loop waits; session22_ncu.sh has its units' load).
#   bash scripts/device/session22_final.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=4 phase causal 260 $GPU_TESTS tests/test_causal_safety.py
TAIL=4 phase attention 200 $GPU_TESTS tests/test_attention_gpu.py -k "prepass or fused_q or launch_variants"
TAIL=2 phase ncu 150 ncu --clock-control none --kernel-name _dkdv_ws_kernel --launch-skip 1 --launch-count 1 \
  --section WarpStateStats --section SourceCounters -o "$R/dkdv" python3 scripts/profile_attention_step.py \
  --seq 8192 --batch-heads 4x16
TAIL=1 phase sass 120 ncu -i "$R/dkdv.ncu-rep" --page source --csv --print-source sass
gzip "$R/sass.log"; rm -f "$R/dkdv.ncu-rep"
tar -czf "$OUT/results.tar.gz" -C /tmp results
