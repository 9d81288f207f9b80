#!/usr/bin/env bash
# Session 31, call 5 (one call, ~3 minutes): where `fp8`'s time goes now that it is the FP8 dQ product, and a second
# reading of the 8k / 16k fwd+bwd figures.
#   1. the kernels of an 8k training call and of a forward against cuDNN's (launch_gaps.py, fresh gradients);
#   2. the 8k / 16k fwd+bwd table, five rounds, fp8 and fp8-bf16dq against cuDNN.
#   bash scripts/device/session31_call5.sh            (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
save() { tar -czf "$OUT/results.tar.gz" -C /tmp results; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TAIL=0 phase gaps 60 python3 scripts/launch_gaps.py --seq 8192 --calls 3
grep -B 1 -A 14 "forward (no_grad)\|training step" "$R/gaps.log" | grep -v "^--$\|UserWarning\|_warn_once"
save
TAIL=12 phase table 150 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets "fp8;fp8-bf16dq" \
  --peers cudnn --modes fwdbwd --rounds 5 --out /tmp/results/table
save
