#!/usr/bin/env bash
# The next session's first device call (1× H200, ~400 s): what session 3 prepared but could not time.
#   1. GPU tests left unrun or changed: the reference match (the dK/dV kernel's loops were re-indexed for
#      half-tile programs after the last GPU run), the forward's block-pointer option (BPTR) bit for bit,
#      half-tile dK/dV programs (bn = 64), the Blackwell block-scaled QKᵀ code through Triton's bf16
#      decomposition, atomic vs kernel dQ with its FP8-dP bar, the doc-masked nvfp4 prefix tests the last
#      call's box cut off.
#   2. fp8 profile at S = 8k: forward 8x3 against 8x3:bptr / 8x2:bptr / 8x4:bptr (AOT: 1,524 → 584 bytes of
#      spills per thread), the backward's default against :half (AOT: ~1,400 → ~500) and atomic.
#   3. the speed table at S = 8k / 16k / 32k, D = 128 (the default launch).
#   FLAMIA_COMMIT=<sha> bash scripts/device/next_kernels.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=20 phase tests 150 $T tests/test_attention_gpu.py tests/test_attention_docmask.py \
  -k "(matches_reference and 128) or block_pointer or half_tile or block_scaled or atomic or (prefix_with_doc_ids and nvfp4)"
TAIL=30 phase profile 120 python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd,fwdbwd --profile --fwd-configs "8x3,8x3:bptr,8x2:bptr,8x4:bptr" --bwd-configs "8x2x32:half,8x1x32:half,8x2x32:atomic,8x2x32:half:atomic" \
  --out "$R/profile"
TAIL=30 phase bench 110 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --out "$R/bench"
tar -czf "$OUT/results.tar.gz" -C /tmp results
