#!/usr/bin/env bash
# Session 32, call 1 (one call, ~9 minutes; phases boxed within 600 s): the table owed at session 31's commit, and
# fold_k's K-major bytes transposed in the shared-memory read (attention_dkdv_ws._store_k_bytes_t, 16-byte stores).
#   1. GPU tests: fold_k's bits under both fp8 presets (FOLD_K_T on), the relaunch test, the fp8 buffer against the
#      reference, the prefix tests of `fp8`;
#   2. kernel times at 8k, FOLD_K_T off (the default) and on, two rounds each in turn (launch_gaps.py);
#   3. the issue's table (8k / 16k / 32k, fwd and fwd+bwd, `fp8` and `fp8-bf16dq` against cuDNN and flash, three
#      rounds) at the defaults;
#   4. the 8k / 16k fwd+bwd of `fp8` with FOLD_K_T on, against cuDNN, three rounds.
#   bash scripts/device/session32_call1.sh            (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh  # also save() and the card's name
TAIL=0 phase tests 120 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py -k "fold_k or (relaunch and not bf16dq) or fp8_ds_out or test_prefix_gpu[fp8-triton]"
grep -E "fold_k \(|PASSED|FAILED|ERROR" "$R/tests.log" | cut -c1-200 | tail -24
test_verdict
save
ON="python3 scripts/device/with_constants.py attention_bwd.FOLD_K_T=True --"
for round in 1 2; do
  TAIL=0 phase "gaps_off_$round" 40 python3 scripts/launch_gaps.py --seq 8192 --calls 3
  TAIL=0 phase "gaps_on_$round" 40 $ON scripts/launch_gaps.py --seq 8192 --calls 3
done
for f in off_1 on_1 off_2 on_2; do
  echo "-- FOLD_K_T $f"; grep -A 14 "training step" "$R/gaps_$f.log" | grep -E "key_copies|dkdv|per call"
done
save
TAIL=30 phase table 230 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
TAIL=8 phase table_on 70 $ON scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets "fp8" \
  --peers cudnn --modes fwdbwd --rounds 3 --out /tmp/results/table_on
save
