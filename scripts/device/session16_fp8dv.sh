#!/usr/bin/env bash
# Session 16: the FP8 dV product (AttentionSpec.fp8_dv) and the ws dK/dV kernel's pair loop (ws_pairs) on the H200.
#   bash scripts/device/session16_fp8dv.sh   (carry .gpu; .gpu/base holds the kernels before them: git archive 5ed10b3)
# 1. the GPU tests: the dO pre-pass's transposed bytes, the Gluon / ws (with and without pairs) / Triton dK/dV kernels
#    against each other, accuracy vs fp32 at S = 4096, the Gluon backward's causal prefix tests;
# 2. a training step's kernels at S = 8k: before, after, after with pairs (launch_gaps.py, two interleaved rounds);
# 3. the speed table against cuDNN, flash SDPA and FlexAttention, and fwd + bwd with pairs against cuDNN.
set -uo pipefail
source scripts/device/setup.sh
TAIL=3 phase tests_quant 120 $GPU_TESTS tests/test_quantize.py -k fused_delta
TAIL=40 phase tests_attention 450 $GPU_TESTS tests/test_attention_gpu.py
TAIL=4 phase tests_causal 150 $GPU_TESTS tests/test_causal_safety.py -k gluon_backward
echo '{"bwd": {"ws_pairs": true}}' > /tmp/pairs.json
base=$(base_kernels)
for round in 1 2; do
  TAIL=1 phase "gaps_base_$round" 60 env PYTHONPATH="$base" python3 scripts/launch_gaps.py --seq 8192
  TAIL=1 phase "gaps_new_$round" 60 python3 scripts/launch_gaps.py --seq 8192
  TAIL=1 phase "gaps_pairs_$round" 60 python3 scripts/launch_gaps.py --seq 8192 --launch /tmp/pairs.json
done
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep "dkdv\|_dq\|copies\|delta\|per call\|kernels" "$f"; done
TAIL=24 phase bench 330 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --rounds 3 --out "$R/bench"
TAIL=10 phase bench_pairs 200 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --modes fwdbwd --rounds 3 --launch /tmp/pairs.json --out "$R/bench_pairs"
tar -czf "$OUT/results.tar.gz" -C /tmp results
