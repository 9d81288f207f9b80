#!/usr/bin/env bash
# Session 31, call 7 (one call, ~3 minutes): K's k_t copies at 4 warps, the default since this commit.
#   1. kernel times at 8k (launch_gaps.py) at the default and at 2 warps;
#   2. GPU tests of `fp8`'s backward: the fp8 dS buffer against the reference, the relaunch test, the prefix tests;
#   3. the 8k / 16k fwd+bwd table, three rounds.
#   bash scripts/device/session31_call7.sh            (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
save() { tar -czf "$OUT/results.tar.gz" -C /tmp results; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TAIL=0 phase kwarps_default 40 python3 scripts/launch_gaps.py --seq 8192 --calls 3
TAIL=0 phase kwarps_2 40 python3 scripts/device/with_constants.py \
  "attention_bwd_copies.KEY_COPIES_WARPS={'k': 16, 'k_t': 2, 'v': 8}" -- scripts/launch_gaps.py --seq 8192 --calls 3
for f in default 2; do echo "-- K copies ($f)"; grep -A 14 "training step" "$R/kwarps_$f.log" | grep -E "key_copies|per call"; done
save
TAIL=0 phase tests 150 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py -k "relaunch or fp8_ds_out or (prefix_gpu and fp8 and not launch_options and not gluon)"
grep -E "PASSED|FAILED|ERROR" "$R/tests.log" | sed -E 's/ (PASSED|FAILED|ERROR).*/ \1/' | tail -20
grep -E "^(FAILED|ERROR)|passed|failed" "$R/tests.log" | tail -4
save
TAIL=10 phase table 100 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets "fp8" \
  --peers cudnn --modes fwdbwd --rounds 3 --out /tmp/results/table
save
