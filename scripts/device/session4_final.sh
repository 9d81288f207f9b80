#!/usr/bin/env bash
# One device call (1× H200, ~150 s): two stack defaults measured against what they replace, in one process,
# gpt-1b at 8k (bench_train's setup): FSDP2 keeping one rank's gathered block parameters through the backward
# (parallel.reshard_after_forward=default; "always" was the behaviour before) and the fused AdamW on CUDA
# (train.optimizer_impl=auto; foreach before). torchtitan ran 15% faster than our bf16 in the last call.
#   FLAMIA_COMMIT=<sha> bash scripts/device/session4_final.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
TAIL=14 phase bench_train 200 python3 scripts/bench_train.py --model gpt-1b --recipes bf16 \
  "bf16-before:bf16 parallel.reshard_after_forward=always train.optimizer_impl=foreach" \
  "bf16-reshard:bf16 parallel.reshard_after_forward=always" fp8 --contexts 8k --warmup 3 --steps 4 \
  --profile-steps 1 --tokens-per-step 16384 --micro-tokens 8192 --out "$R/bench_train" --record
cp docs/bench_train.json "$R/bench_train_recorded.json"
tar -czf "$OUT/results.tar.gz" -C /tmp results
