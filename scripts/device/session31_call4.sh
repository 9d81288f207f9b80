#!/usr/bin/env bash
# Session 31, call 4 (one call, ~5 minutes): `fp8` is the FP8 dQ product since 3d31d92 (the former fp8-dsk; the
# former fp8 is fp8-bf16dq) — the GPU tests of the renamed presets and the table under the new names.
#   1. GPU tests: every preset against the reference (D = 64, 128), accuracy against fp32 (the README's cosines),
#      the fp8 dS buffer's tests, ds_chunks, the relaunch test of both fp8 presets, the prefix tests;
#   2. the table: 8k / 16k / 32k, fwd and fwd+bwd, fp8 and fp8-bf16dq against cuDNN and flash SDPA (fresh
#      gradients per call), three rounds.
#   bash scripts/device/session31_call4.sh            (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
save() { tar -czf "$OUT/results.tar.gz" -C /tmp results; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TAIL=0 phase tests 300 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py -k "relaunch or accuracy_vs_exact or triton_matches_reference or fp8_ds or ds_chunks \
  or (prefix_gpu and not launch_options and not gluon_forward)"
grep -E "PASSED|FAILED|ERROR" "$R/tests.log" | sed -E 's/ (PASSED|FAILED|ERROR).*/ \1/' | tail -40
grep -E "cosine vs fp32|relaunched vs|^(FAILED|ERROR)|passed|failed" "$R/tests.log" | cut -c1-400 | tail -14
save
TAIL=30 phase table 200 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 \
  --presets "fp8;fp8-bf16dq" --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
