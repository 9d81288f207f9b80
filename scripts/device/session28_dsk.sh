#!/usr/bin/env bash
# Session 28, call 2: the fp8 preset with its dQ product in FP8 (spec part dsk=fp8: the fp8 dS buffer of the fast
# path by default). The speed table at 8k / 16k / 32k beside the former fp8 (dsk=bf16) and the peers, kernel times
# at 8k, then the GPU tier of the attention and causal-safety tests (-v: each result streamed to the log).
#   bash scripts/device/session28_dsk.sh
set -uo pipefail
source scripts/device/setup.sh
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
TAIL=40 phase table 230 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;qk=fp8,pv=fp8,do=fp8" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/bench
TAIL=0 phase gaps 60 python3 scripts/launch_gaps.py --seq 8192 --calls 3
grep -E "dq_from_ds|dkdv_ws|dq_row_scale|key_copies|per call" "$R/gaps.log"
TAIL=0 phase tests 270 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py
grep -E "PASSED|FAILED|ERROR" "$R/tests.log" | sed -E 's/^(tests\/[^ ]*) .*(PASSED|FAILED|ERROR).*/\2 \1/' \
  | awk '{print $1}' | sort | uniq -c
grep -E "FAILED|ERROR|passed|failed" "$R/tests.log" | tail -25
tar -czf "$OUT/results.tar.gz" -C /tmp results
