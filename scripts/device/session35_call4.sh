#!/usr/bin/env bash
# Session 35, call 4: the chained forward's diagonal tile over half its keys where a program's rows start their key
# block (launch option half_diag; on by default after this call), first on a GPU: its values against the full tile's, the prefix tests through it,
# then kernel times and the forward at 8k / 16k against the defaults.
#   bash scripts/device/session35_call4.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
echo '{"fwd": {"half_diag": true}}' > /tmp/half.json
TAIL=20 phase tests 200 $GPU_TESTS tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "half_diagonal or (prefix_gpu and gluon and halfdiag)"
save
gaps_launches 1 "key_sides|fwd_gluon|per call" default half=/tmp/half.json
save
TAIL=30 phase table 240 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --modes fwd,fwdbwd --rounds 3 --launch half=/tmp/half.json --out /tmp/results/table
save
