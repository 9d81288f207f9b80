#!/usr/bin/env bash
# Session 31, call 8 (one call, ~3 minutes): fold_k over the fp8 dS buffer (attention_bwd.FOLD_K_T, e81cb69).
#   1. GPU tests: fold_k's bits under both fp8 presets (dQ, dK, dV against the copies pass's route, kernel and
#      autograd level), the relaunch test, the fp8 buffer against the reference, the prefix tests of `fp8`;
#   2. kernel times at 8k with FOLD_K_T on (the default) and off (launch_gaps.py);
#   3. the 8k / 16k fwd+bwd table, three rounds.
#   bash scripts/device/session31_call8.sh            (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
save() { tar -czf "$OUT/results.tar.gz" -C /tmp results; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TAIL=0 phase tests 120 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py -k "fold_k or (relaunch and not bf16dq) or fp8_ds_out or test_prefix_gpu[fp8-triton]"
grep -E "fold_k \(|PASSED|FAILED|ERROR" "$R/tests.log" | cut -c1-200 | tail -24
grep -E "^(FAILED|ERROR)|passed|failed" "$R/tests.log" | tail -4
save
TAIL=0 phase gaps_on 40 python3 scripts/launch_gaps.py --seq 8192 --calls 3
TAIL=0 phase gaps_off 40 python3 scripts/device/with_constants.py attention_bwd.FOLD_K_T=False -- \
  scripts/launch_gaps.py --seq 8192 --calls 3
for f in on off; do echo "-- FOLD_K_T $f"; grep -A 14 "training step" "$R/gaps_$f.log" | grep -E "key_copies|dkdv|per call"; done
save
TAIL=8 phase table 60 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets "fp8" \
  --peers cudnn --modes fwdbwd --rounds 3 --out /tmp/results/table
save
