#!/usr/bin/env bash
# Session 30, call 3 (~8 minutes): launch option fold_k (the ws dK/dV kernel makes K's backward copies; the copies
# pass skips K's half), made the fast path's default at this commit.
#   1. its bit-identity tests (kernel level and autograd level) and the deferred-copy tests;
#   2. the 8k / 16k fwd+bwd table: fp8 (fold_k, the default) and "[launch]" rows with {"bwd": {"fold_k": false}},
#      beside cuDNN, the same run; the kernels of one 8k training call (launch_gaps.py);
#   3. the GPU tier's reference comparisons and the causal prefix tests (fp8 presets).
#   bash scripts/device/session30_foldk.sh
set -uo pipefail
source scripts/device/setup.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TAIL=0 phase fold_tests 150 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  -k "fold_k or deferred"
grep -E "PASSED|FAILED|ERROR|fold_k|bit-identical" "$R/fold_tests.log" | tail -20
echo '{"bwd": {"fold_k": false}}' > /tmp/nofold.json
TAIL=16 phase table 150 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets "fp8;fp8-dsk" \
  --peers cudnn --modes fwdbwd --rounds 3 --launch /tmp/nofold.json --out /tmp/results/table
TAIL=20 phase gaps 60 python3 scripts/launch_gaps.py --seq 8192 --calls 3
TAIL=0 phase tests 200 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py -k "matches_reference or prefix or ds_out or ds_chunks or accuracy"
grep -E "PASSED|FAILED|ERROR" "$R/tests.log" | sed -E 's/ (PASSED|FAILED|ERROR).*/ \1/' | tail -40
grep -E "^(FAILED|ERROR)|passed|failed" "$R/tests.log" | tail -10
tar -czf "$OUT/results.tar.gz" -C /tmp results
