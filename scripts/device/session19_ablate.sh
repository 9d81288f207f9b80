#!/usr/bin/env bash
# Session 19: what each part of the fp8 forward's off-diagonal tile costs (scripts/fwd_ablation_probe.py).
#   bash scripts/device/session19_ablate.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=30 phase ablate 400 python3 scripts/fwd_ablation_probe.py --seqs 8192 16384 --rounds 3 --calls 16
tar -czf "$OUT/results.tar.gz" -C /tmp results
