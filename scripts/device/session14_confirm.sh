#!/usr/bin/env bash
# Session 14, third call (run at ba035ca with the loop peeled, again at the next commit with it restored): the
# warp-specialized forward's GPU tests, then the forward against cuDNN and the default launch, interleaved.
#   bash scripts/device/session14_confirm.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=14 phase tests_ws 300 $GPU_TESTS tests/test_attention_gpu.py -k "ws_forward"
TAIL=16 phase ab 300 python3 scripts/ab_forward.py --seqs 8192 16384 --variants default ws ws+nopp --rounds 3 \
  --out "$R/ab.json"
tar -czf "$OUT/results.tar.gz" -C /tmp results
