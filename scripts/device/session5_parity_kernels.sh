#!/usr/bin/env bash
# One device call on 2× H200 (< 580 s wall), two jobs side by side:
#   GPU 1: the revised `flamia` recipe's 2,000-step loss parity run on gpt-125m (the bf16 run it is
#          compared with is the same command's, from the previous call: same seed, data and held-out);
#   GPU 0: the kernels' launch options (scripts/device/session5_kernels.sh's tests and sweep, cut to
#          the options most likely to pay), then the `fp8` recipe's parity run with the time left
#          (a diagnostic: were the FP8 paths part of the first flamia's +5% gap?).
#   FLAMIA_COMMIT=<sha> bash scripts/device/session5_parity_kernels.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
WALL=${WALL:-575}
left() { echo $((WALL - SECONDS - ${1:-25})); }
mkdir -p "$R/parity"
parity() {  # parity PRESET GPU BUDGET: one bench_parity run (gpt-125m, 2000 × 1024 × 4), in the background
  CUDA_VISIBLE_DEVICES=$2 timeout -k 15 $(($3 + 60)) python3 scripts/bench_parity.py --preset "$1" \
    --model gpt-125m --run-dir "runs/parity/$1" --out "$R/parity/$1.json" --corpus .gpu/corpus32k \
    --steps 2000 --seq-len 1024 --micro-batch 4 --budget "$3" -- "data.cache_dir=/tmp/tok_parity_$1" \
    > "$R/parity_$1.log" 2>&1 &
  echo "--- parity $1 on GPU $2, budget $3 s (at $SECONDS s)"
}
parity flamia 1 "$(left 40)"
FLAMIA_PID=$!

export CUDA_VISIBLE_DEVICES=0
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
# the variants below (causal; the non-causal and other ones are in session5_kernels.sh): ~15 kernel compiles
K="(forward_launch_variants and True and (4x3 or 4x2)) or (backward_launch_variants and (bm or bn) and not 4x3x64)"
TAIL=40 phase tests 130 $T tests/test_attention_gpu.py tests/test_causal_safety.py \
  -k "$K or (half_tile_launches and fp8 and not nvfp4)"
TAIL=30 phase sweep 110 python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd --profile --fwd-configs "8x3,4x3:bm64,4x2:bm64" \
  --bwd-configs "8x2x32:dkdv,4x2x32:half:dkdv,8x2x32:dq,4x2x32:bm64:dq,4x3x32:bm64:dq" --out "$R/sweep"
TAIL=6 phase pick 10 python3 scripts/pick_launch.py "$R/sweep/bench_attention.json" --out "$R/launch.json"
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
parity fp8 0 "$(left 40)"
FP8_PID=$!
wait "$FP8_PID"; echo "=== parity fp8 exit $? (at $SECONDS s)"; tail -n 4 "$R/parity_fp8.log"
wait "$FLAMIA_PID"; echo "=== parity flamia exit $? (at $SECONDS s)"; tail -n 4 "$R/parity_flamia.log"
unset CUDA_VISIBLE_DEVICES
tar -czf "$OUT/results.tar.gz" -C /tmp results
echo "done at $SECONDS s"
