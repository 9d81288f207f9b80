#!/usr/bin/env bash
# Session 8's second call (1× H200, ~450 s): the causal kernels' programs start longest first by groups
# of heads (kernels/program_order.py) — the GPU tests of every kernel under the new order, an interleaved
# A/B of the forward (groups of 1 = the order before, 2, the default, 16; the Triton forward too), and the
# backward kernels each alone with and without the groups (bench_attention --profile).
#   bash scripts/device/session8_order.sh
# Ran at b25e1c0 and reverted after it (df99cf8): no gain the noise could not explain in the forward
# (8k: 1.736 vs 1.756 ms head after head), dK/dV slower (5.941 vs 5.836 ms at 8k, 11.28 vs 10.84 at 16k),
# dQ mixed (2.929 vs 2.877, 5.425 vs 5.548); docs/benchmarks.md. The flags hgN / dqhgN / triton went with it.
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=8 phase ab 150 python3 scripts/ab_forward.py --seqs 8192 16384 --variants default hg1 hg2 hg16 triton triton+hg1 \
  --rounds 3 --out "$R/ab.json"
TAIL=40 phase profile 150 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd --profile --bwd-configs 4x3x32:half:pre:gluon:dkdv,4x3x32:half:pre:gluon:dkdv:hg1,4x3x32:bm64:pre:dq,4x3x32:bm64:pre:dq:dqhg1 \
  --out "$R/profile"
TAIL=10 phase tests_gpu 200 $T tests/test_attention_gpu.py -x
TAIL=6 phase tests_causal 60 $T tests/test_causal_safety.py -k gluon
tar -czf "$OUT/results.tar.gz" -C /tmp results
