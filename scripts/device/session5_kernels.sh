#!/usr/bin/env bash
# One device call (1× H200, < 570 s): the kernels' launch options, checked then timed, then used.
#   1. GPU tests of every launch variant timed below against the default launch (forward programs of 64
#      query rows, dQ programs of 64 rows, dK/dV of 64 keys, other warps / stages / sub-tiles), the
#      causal prefix tests under the half-tile launches, and the pre-pass launch overrides' bytes;
#   2. the forward pre-pass part by part with launch variants (scripts/bench_prepass.py);
#   3. the fp8 profile at S = 8k with each kernel timed alone per config, and the pick of the fastest per
#      kernel (scripts/pick_launch.py: the first config of each kernel is the default, the baseline);
#   4. the speed table at 8k / 16k / 32k with the default and the picked launch in one process;
#   5. bench_train gpt-1b at 8k: bf16, fp8 and flamia-attention with the picked launch (not recorded:
#      the recorded rows are the package defaults').
#   FLAMIA_COMMIT=<sha> bash scripts/device/session5_kernels.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=60 phase tests 170 $T tests/test_attention_gpu.py tests/test_causal_safety.py tests/test_quantize.py \
  -k "launch_variants or half_tile_launches or launch_overrides"
TAIL=14 phase prepass 30 python3 scripts/bench_prepass.py
FWD="8x3,4x3:bm64,4x2:bm64,8x3:bm64"
BWD="8x2x32:dkdv,8x3x32:dkdv,4x2x32:half:dkdv,4x3x32:half:dkdv"
BWD="$BWD,8x2x32:dq,8x2x64:dq,8x3x32:dq,8x3x64:dq,4x2x32:bm64:dq,4x3x32:bm64:dq,4x3x64:bm64:dq"
TAIL=30 phase sweep 130 python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn \
  --profile --fwd-configs "$FWD" --bwd-configs "$BWD" --out "$R/sweep"
TAIL=6 phase pick 10 python3 scripts/pick_launch.py "$R/sweep/bench_attention.json" --out "$R/launch.json"
[ -f "$R/launch.json" ] || echo '{}' > "$R/launch.json"
TAIL=40 phase bench 100 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn --launch "$R/launch.json" --out "$R/bench"
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
TAIL=12 phase bench_train 110 python3 scripts/bench_train.py --model gpt-1b --recipes bf16 fp8 flamia-attention \
  --contexts 8k --warmup 3 --steps 4 --profile-steps 1 --tokens-per-step 16384 --micro-tokens 8192 \
  --attention-launch "$R/launch.json" --out "$R/bench_train"
tar -czf "$OUT/results.tar.gz" -C /tmp results
