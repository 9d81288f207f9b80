#!/usr/bin/env bash
# Session 5's last device call (1× H200, < 265 s wall): the fp8 fast path's new launch defaults (programs of
# half a tile, 4 warps, in the forward and both backward kernels; chosen by session5_parity_kernels.sh's sweep):
#   1. GPU tests on the defaults: fp8 kernel vs reference at D = 128, accuracy vs exact, the causal prefix
#      tests on the Triton path, doc-masked kernel vs reference (the defaults fall back to full-tile dK/dV);
#   2. the speed table, fp8 vs cuDNN, D = 128, S = 8k / 16k / 32k, fwd and fwd+bwd;
#   3. bench_train gpt-1b at 8k: bf16 and fp8, recorded.
#   FLAMIA_COMMIT=<sha> bash scripts/device/session5_final.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=30 phase tests 75 $T tests/test_attention_gpu.py tests/test_causal_safety.py tests/test_attention_docmask.py \
  -k "((triton_matches_reference and 128-fp8) or accuracy_vs_exact or (test_prefix_gpu and triton) or with_doc_ids) and fp8 and not mxfp8 and not nvfp4 and not half_tile"
TAIL=20 phase bench 70 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn --out "$R/bench"
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
TAIL=12 phase bench_train 105 python3 scripts/bench_train.py --model gpt-1b --recipes bf16 fp8 --contexts 8k \
  --warmup 3 --steps 4 --profile-steps 1 --tokens-per-step 16384 --micro-tokens 8192 --out "$R/bench_train" --record
cp docs/bench_train.json "$R/bench_train_recorded.json"
tar -czf "$OUT/results.tar.gz" -C /tmp results
