#!/usr/bin/env bash
# Session 20: the chained forward with each product in two halves of 64 keys (pipe 5), and with the next tile's
# first QKᵀ half behind P·V (pipe 6): GPU tests against the Triton CHAIN kernel, then timing against pipe 3 and
# cuDNN in one process.
#   bash scripts/device/session20_split.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=30 phase tests 200 $GPU_TESTS tests/test_attention_gpu.py -k "gluon_forward_matches or gluon_forward_accuracy"
TAIL=20 phase ab 150 python3 scripts/ab_forward.py --seqs 8192 16384 --variants default split splitnext --rounds 5 \
  --out "$R/ab.json"
echo '{"fwd": {"pipe": 5}}' > /tmp/pipe5.json
echo '{"fwd": {"pipe": 6}}' > /tmp/pipe6.json
TAIL=12 phase table5 120 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --modes fwd --rounds 3 --launch /tmp/pipe5.json --out "$R/table5"
TAIL=12 phase table6 120 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --modes fwd --rounds 3 --launch /tmp/pipe6.json --out "$R/table6"
tar -czf "$OUT/results.tar.gz" -C /tmp results
