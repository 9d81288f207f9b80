#!/usr/bin/env bash
# Session 6's training check (1× H200, ~150 s): gpt-1b at 8k, bf16 and fp8, after the backward's `pre`
# copies (FLAMIA fp8 attention fwd+bwd 0.47x -> 0.67x cuDNN at 8k), recorded into docs/bench_train.json.
#   FLAMIA_COMMIT=<sha> bash scripts/device/session6_train.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
TAIL=14 phase bench_train 140 python3 scripts/bench_train.py --model gpt-1b --recipes bf16 fp8 --contexts 8k \
  --warmup 3 --steps 6 --profile-steps 1 --tokens-per-step 16384 --micro-tokens 8192 --out "$R/bench_train" --record
cp docs/bench_train.json "$R/bench_train_recorded.json"
tar -czf "$OUT/results.tar.gz" -C /tmp results
