#!/usr/bin/env bash
# Session 35, call 1: the Gluon forward's launch order (head_chunk), its programmatic dependent launch after the
# key-sides pass (pdl) and the Q bytes a no_grad forward no longer writes (keep_q restores them), first on a GPU.
#   bash scripts/device/session35_call1.sh   (carry .gpu)
# 1. GPU tests: the new options keep every bit (training call and no_grad forward), the fused-Q and Gluon forward
#    tests, the fp8 prefix tests through the Gluon forward.
# 2. launch_gaps at 8k: the defaults, groups of 8 heads, pdl, both.
# 3. The forward at 8k / 16k under each option, single calls alternating with the defaults and cuDNN.
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
L=/tmp/launch; mkdir -p $L
for n in 4 8 16; do echo "{\"fwd\": {\"head_chunk\": $n}}" > $L/chunk$n.json; done
echo '{"fwd": {"pdl": true}}' > $L/pdl.json
echo '{"fwd": {"head_chunk": 8, "pdl": true}}' > $L/c8pdl.json
echo '{"fwd": {"keep_q": true}}' > $L/keepq.json
TAIL=30 phase tests 200 $GPU_TESTS tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "launch_order_and_pdl or gluon_fused_q or gluon_forward_matches or (prefix_gpu and gluon)"
save
gaps_launches 1 "key_sides|fwd_gluon|per call" default chunk8=$L/chunk8.json pdl=$L/pdl.json c8pdl=$L/c8pdl.json
save
TAIL=40 phase table 300 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --modes fwd --rounds 3 --launch chunk4=$L/chunk4.json --launch chunk8=$L/chunk8.json \
  --launch chunk16=$L/chunk16.json --launch pdl=$L/pdl.json --launch c8pdl=$L/c8pdl.json \
  --launch keepq=$L/keepq.json --out /tmp/results/table
save
