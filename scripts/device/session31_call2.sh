#!/usr/bin/env bash
# Session 31, call 2 (one call, ~6 minutes; phases boxed within 600 s): what changed after call 1.
#   1. the GPU tests of ONE_LOOP as the default (`dq_from_ds`: ds_out's dQ against the Gluon dQ kernel's, the fp8
#      buffer's dQ against the reference, the prefix tests of the fast path) and the relaunch test, whose launcher
#      list went stale when ds_out became the default (call 1: FAILED; now found by search);
#   2. the probe's bits and times of ONE_LOOP (the default) against the two loops (variant 6);
#   3. the kernels of a training call with fresh gradients (launch_gaps.py: no accumulation kernels left);
#   4. the issue's table with fresh gradients per call (bench_attention.py's `one_call` leaves): 8k / 16k / 32k,
#      fwd and fwd+bwd, fp8 and fp8-dsk against cuDNN and flash SDPA, three rounds.
#   bash scripts/device/session31_call2.sh            (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
save() { tar -czf "$OUT/results.tar.gz" -C /tmp results; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TAIL=0 phase tests 230 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  tests/test_causal_safety.py -k "relaunch or ds_out or fp8_ds or (prefix_gpu and fp8 and not launch_options)"
grep -E "PASSED|FAILED|ERROR" "$R/tests.log" | sed -E 's/ (PASSED|FAILED|ERROR).*/ \1/' | tail -30
grep -E "relaunched vs|^(FAILED|ERROR)|passed|failed" "$R/tests.log" | cut -c1-300 | tail -8
save
TAIL=8 phase probe 40 python3 scripts/device/dq_from_ds_probe.py --rounds 2 --buffers bf16,fp8 --variants 6
save
TAIL=0 phase gaps 40 python3 scripts/launch_gaps.py --seq 8192 --calls 3
grep -A 14 "training step" "$R/gaps.log"
save
TAIL=30 phase table 220 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets "fp8;fp8-dsk" \
  --peers cudnn,flash --modes fwd,fwdbwd --rounds 3 --out /tmp/results/table
save
