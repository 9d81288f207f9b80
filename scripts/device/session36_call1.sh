#!/usr/bin/env bash
# Session 36, call 1: the key-sides pass as a grid of programs walking the token blocks (launch per_sm / stages),
# bit-checked and timed alone and inside the forward; on an H200 first the table at the session's start.
#   bash scripts/device/session36_call1.sh   (carry .gpu; .gpu/walk1.json, .gpu/walk1s3.json the launch files)
# Ran at 065ab7e; the walking grid lost in every launch and was removed after this call (docs/benchmarks.md).
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  TAIL=40 phase table 260 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
    --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
  save
fi
TAIL=6 phase tests 150 $GPU_TESTS tests/test_quantize.py -k "walking_grid or key_sides"
save
TAIL=20 phase prepass 120 python3 scripts/bench_prepass.py
save
gaps_launches 1 "key|attention|fwd|sides" default walk1=.gpu/walk1.json walk1s3=.gpu/walk1s3.json
save
TAIL=30 phase fwd 200 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd --rounds 3 --launch walk1=.gpu/walk1.json --launch walk1s3=.gpu/walk1s3.json
save
TAIL=40 phase regime 120 python3 scripts/device/regime_timeline.py --seq 8192 --calls 6 --presets fp8
save
