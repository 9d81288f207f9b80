#!/usr/bin/env bash
# Session 6's first device call (1× H200, ~270 s): scripts/device/next_session.sh without its gpt-1b
# training bench (issue 6 is blocked on FP4 hardware; more rows there change nothing):
#   1. the attention GPU tier under the half-tile defaults (D = 64, non-causal at scale, fused Q,
#      emulated presets), the pre-pass launch overrides and the per-token fp8 pre-pass kernels
#      against `formats` at scale (their row arithmetic is one helper since 81dd11b);
#   2. the forward pre-pass part by part with warp variants (scripts/bench_prepass.py, never run), and
#      the speed table with the fuse_q launch option beside the default (both rows in one run).
#   FLAMIA_COMMIT=<sha> bash scripts/device/session6_first.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=40 phase tests 200 $T tests/test_attention_gpu.py tests/test_causal_safety.py tests/test_attention_docmask.py \
  tests/test_quantize.py -k "not test_gpu_triton_matches_formats_at_scale or fp8_token or fp8_key_side"
TAIL=14 phase prepass 30 python3 scripts/bench_prepass.py
echo '{"fwd": {"fuse_q": true}}' > "$R/fuse_q.json"
TAIL=20 phase fuse_q 60 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 --peers cudnn \
  --launch "$R/fuse_q.json" --out "$R/fuse_q"
tar -czf "$OUT/results.tar.gz" -C /tmp results
