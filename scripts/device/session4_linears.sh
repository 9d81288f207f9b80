#!/usr/bin/env bash
# One device call (1× H200, ~330 s): the FP8 linears after the split rowwise quantizer (wgrad's dYᵀ, Xᵀ and
# dgrad's Wᵀ were quantized by out/64 programs walking 8K-token rows twice; now every tile runs at once).
#   1. GPU tests: the quantizer's bytes against the CPU path (the split path included), the linears' GPU paths;
#   2. bench_linear at gpt-1b's shapes (8K tokens): bf16 vs fp8 rowwise, bare GEMM and fwd+bwd with quantization;
#   3. bench_train gpt-1b at 8k: bf16 / fp8 / fp8-linears / flamia-attention / flamia in one process, recorded
#      into docs/bench_train.json (copied back under results/).
#   FLAMIA_COMMIT=<sha> bash scripts/device/session4_linears.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=8 phase tests_linear 60 $T tests/test_linear_prepass.py tests/test_linear.py
for shape in "2048 2048" "1024 2048" "5504 2048" "2048 5504"; do
  set -- $shape
  TAIL=6 phase "linear_n$1_k$2" 40 python3 scripts/bench_linear.py --m 8192 --n "$1" --k "$2" --formats bf16 fp8
done
TAIL=30 phase bench_train 240 python3 scripts/bench_train.py --model gpt-1b \
  --recipes bf16 fp8 fp8-linears flamia-attention flamia --contexts 8k --warmup 3 --steps 4 --profile-steps 1 \
  --tokens-per-step 16384 --micro-tokens 8192 --out "$R/bench_train" --record
cp docs/bench_train.json "$R/bench_train_recorded.json"
tar -czf "$OUT/results.tar.gz" -C /tmp results
