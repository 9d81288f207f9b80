#!/usr/bin/env bash
# Session 6: is gpt-1b's fp8 step at 8k slower with the backward's `pre` copies? (ec82307 measured
# 21,158 tokens/s at busy 59% against 391e12c's 28,072 at 72%, though attention's backward fell 153 -> 92 ms.)
# fp8 with the defaults, then with pre off, then the defaults again, in one call (1× H200, ~150 s).
#   FLAMIA_COMMIT=<sha> bash scripts/device/session6_pre_ab.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
echo '{"bwd": {"pre": false}}' > "$R/pre_off.json"
B="python3 scripts/bench_train.py --model gpt-1b --contexts 8k --warmup 3 --steps 8 --profile-steps 1 --tokens-per-step 16384 --micro-tokens 8192"
TAIL=4 phase pre_on 60 $B --recipes fp8 --out "$R/pre_on"
TAIL=4 phase pre_off 60 $B --recipes fp8 --attention-launch "$R/pre_off.json" --out "$R/pre_off"
TAIL=4 phase pre_on2 60 $B --recipes fp8 --out "$R/pre_on2"
nproc; uptime
tar -czf "$OUT/results.tar.gz" -C /tmp results
