#!/usr/bin/env bash
# Session 38, the closing call for issue 3 on the H200: the bench's whole table (D 64 and 128, S 2k to 32k, cuDNN,
# flash and FlexAttention, the accuracy table and the fp8 time profile), then the GPU tiers of the causal prefix
# tests (every preset) and of the kernels' tests, each phase time-boxed and saved as it ends.
#   bash scripts/device/session38_call1.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=60 phase table 230 python3 scripts/bench_attention.py --seqs 2048,8192,16384,32768 --dims 64,128 \
  --presets fp8 --peers cudnn,flash,flex --modes fwd,fwdbwd --rounds 2 --accuracy --profile --out /tmp/results/table
save
TAIL=6 phase causal 150 $GPU_TESTS tests/test_causal_safety.py
test_verdict causal
save
TAIL=6 phase kernels 190 $GPU_TESTS tests/test_attention_gpu.py
test_verdict kernels
grep -iE "cosine" "$R/kernels.log" | head -8
save
