#!/usr/bin/env bash
# Session 8's last call (1× H200, ~250 s): Vᵀ's token-block copy in the Gluon forward's MMA key order
# (P·V's FP8 operand straight from the QKᵀ accumulator's registers, no shuffles) — its GPU tests, the
# causal prefix tests on the Gluon kernels, an interleaved A/B against the tokens' order (vnat), the speed
# table and one call's kernel timeline.
#   bash scripts/device/session8_mma.sh
# Ran at b484245 and reverted after it: the forward kernel went 1397 -> 1387 µs (P·V without shuffles), but
# the key-side pass's permuted Vᵀ stores took it from 166 to 557 µs (torch.profiler), so the forward read
# 2.014 ms against 1.739 with the tokens' order (vnat) at 8k; docs/benchmarks.md.
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=6 phase tests_quant 40 $T tests/test_quantize.py -k key_side
TAIL=10 phase tests_fwd 100 $T tests/test_attention_gpu.py -k "gluon or fused_q"
TAIL=6 phase tests_causal 50 $T tests/test_causal_safety.py -k gluon
TAIL=10 phase ab 60 python3 scripts/ab_forward.py --seqs 8192 16384 --variants default vnat --rounds 3 --out "$R/ab.json"
TAIL=30 phase bench 80 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --out "$R/bench"
TAIL=12 phase gaps 30 python3 scripts/launch_gaps.py --seq 8192
tar -czf "$OUT/results.tar.gz" -C /tmp results
