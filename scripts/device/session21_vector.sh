#!/usr/bin/env bash
# Session 21: the key-side pass and dO's pass with D a constexpr (their tiles' masks fold away at D = BLOCK_D, so
# loads and stores are vectors; sm_90 SASS per program: K 3720 -> 1376, Vᵀ 2624 -> 1584 at 16 warps, the one-launch
# pass 255 registers with 2.1 KB of spills -> 241 and none at 8 warps, dO's pass 3720 -> 1248). The GPU tiers of the
# pre-pass bytes, the relaunch / side-stream bit identities and the causal prefix tests, then the pre-pass timings,
# a kernel trace and the speed table against cuDNN.
#   bash scripts/device/session21_vector.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=4 phase quantize_gpu 200 $GPU_TESTS tests/test_quantize.py
TAIL=6 phase attention_gpu 200 $GPU_TESTS tests/test_attention_gpu.py -k "relaunch or side_stream or deferred or accuracy_vs_exact"
TAIL=4 phase causal 200 $GPU_TESTS tests/test_causal_safety.py
TAIL=16 phase prepass_8k 90 python3 scripts/bench_prepass.py
TAIL=36 phase gaps 60 python3 scripts/launch_gaps.py --seq 8192
TAIL=20 phase table 200 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --rounds 3 --out "$R/table"
tar -czf "$OUT/results.tar.gz" -C /tmp results
