#!/usr/bin/env bash
# Session 21: the forward beside its key-side pass (key_flags: the pass on a persistent grid publishing each K/V
# slice, the Gluon forward its programmatic dependent). GPU tests (bits, counters, relaunch, the causal prefix tests'
# GPU tier), then the A/B against the forward after the pass, the pass's chunk and grid, and the speed table.
#   bash scripts/device/session21_keys.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=10 phase gpu_tests 200 $GPU_TESTS tests/test_attention_gpu.py -k "key_pass or relaunch"
TAIL=4 phase causal 200 $GPU_TESTS tests/test_causal_safety.py
TAIL=14 phase ab 150 python3 scripts/ab_forward.py --seqs 8192 16384 --variants default nokeys kp66 --rounds 3 \
  --out "$R/ab.json"
TAIL=8 phase ab_chunk16 90 python3 scripts/device/with_constants.py quantize.FLAGGED_CHUNK=16 -- \
  scripts/ab_forward.py --seqs 8192 --variants default nokeys --rounds 3
TAIL=20 phase table 200 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --rounds 3 --out "$R/table"
tar -czf "$OUT/results.tar.gz" -C /tmp results
