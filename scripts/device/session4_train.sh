#!/usr/bin/env bash
# One device call (1× H200, ~300 s): issue 6's bench_train rows at 2k and 32k after the split rowwise quantizer
# (08ded08) and the dQ kernel's FP8 dP (0a8de13); session4_attention.sh's 2k box (70 s) cut flamia and its 32k
# row asked for 16,384 tokens per step, less than one 32k row. Each context in one process, recorded.
#   FLAMIA_COMMIT=<sha> bash scripts/device/session4_train.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
BT="python3 scripts/bench_train.py --model gpt-1b --recipes bf16 fp8 flamia --record"
TAIL=8 phase bench_train_2k 150 $BT --contexts 2k --tokens-per-step 16384 --micro-tokens 8192 --warmup 3 --steps 4 \
  --profile-steps 1 --out "$R/bench_train_2k"
cp docs/bench_train.json "$R/bench_train_recorded.json"
TAIL=8 phase bench_train_32k 260 $BT --contexts 32k --tokens-per-step 32768 --micro-tokens 32768 --warmup 2 \
  --steps 3 --profile-steps 1 --out "$R/bench_train_32k"
cp docs/bench_train.json "$R/bench_train_recorded.json"
tar -czf "$OUT/results.tar.gz" -C /tmp results
