#!/usr/bin/env bash
# Session 16: does the FP8 dV product's chained accumulation lose accuracy with S? scripts/dv_accuracy_probe.py on
# this tree's kernels and on .gpu/base's (5ed10b3: bf16 dV), S = 2k, 8k, 16k.
#   bash scripts/device/session16_acc.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
base=$(base_kernels)
TAIL=8 phase acc_new 280 python3 scripts/dv_accuracy_probe.py --seqs 2048 8192 16384
TAIL=8 phase acc_base 200 env PYTHONPATH="$base" python3 scripts/dv_accuracy_probe.py --seqs 2048 8192 16384
tar -czf "$OUT/results.tar.gz" -C /tmp results
