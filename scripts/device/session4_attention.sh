#!/usr/bin/env bash
# One device call (1× H200, ~480 s) after the dQ kernel's dP became an FP8 product (dO·Vᵀ over V's rows read
# out of the stored Vᵀ; AOT sm_90: spills 28 -> 0 bytes, wgmma e4m3 for S and dP):
#   1. GPU tests: kernel vs reference (every preset, D 64/128), accuracy vs exact at S=4096, atomic vs kernel dQ,
#      causal prefix tests on the Triton path, doc-masked kernel vs reference;
#   2. fp8 profile at S = 8k (backward default and atomic), then the speed table, D = 128, S = 8k / 16k / 32k;
#   3. bench_linear's host profile at gpt-1b's 2048 x 2048 projection (why fp8-linears' busy is 74%);
#   4. bench_train gpt-1b at 2k (bf16 / fp8 / flamia) and 32k (bf16 / fp8 / flamia), recorded.
#   FLAMIA_COMMIT=<sha> bash scripts/device/session4_attention.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=40 phase tests 170 $T tests/test_attention_gpu.py tests/test_causal_safety.py tests/test_attention_docmask.py \
  -k "test_gpu_triton_matches_reference or test_gpu_accuracy_vs_exact or test_gpu_atomic_dq or (test_prefix_gpu and triton and fp8)"
TAIL=20 phase profile 60 python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd,fwdbwd --profile --bwd-configs "8x2x32:atomic" --out "$R/profile"
TAIL=30 phase bench 80 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --out "$R/bench"
TAIL=45 phase linear_host 40 python3 scripts/bench_linear.py --m 8192 --n 2048 --k 2048 --formats bf16 fp8 \
  --host-profile 20
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
BT="python3 scripts/bench_train.py --model gpt-1b --tokens-per-step 16384 --micro-tokens 8192 --record"
TAIL=12 phase bench_train_2k 70 $BT --recipes bf16 fp8 flamia --contexts 2k --warmup 3 --steps 4 --profile-steps 1 \
  --out "$R/bench_train_2k"
TAIL=12 phase bench_train_32k 150 $BT --recipes bf16 fp8 flamia --contexts 32k --warmup 2 --steps 3 \
  --profile-steps 1 --out "$R/bench_train_32k"
cp docs/bench_train.json "$R/bench_train_recorded.json"
tar -czf "$OUT/results.tar.gz" -C /tmp results
