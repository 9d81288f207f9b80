#!/usr/bin/env bash
# Session 17: the Gluon dQ kernel's ring refill issued while the next S and dP run (DQ_EARLY_REFILL), with and
# without FP8 dQ and a third stage: bits, then the dQ kernel's time (scripts/dq_refill_probe.py).
#   bash scripts/device/session17_refill.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=30 phase refill 400 python3 scripts/dq_refill_probe.py --seqs 8192 16384 --rounds 3
tar -czf "$OUT/results.tar.gz" -C /tmp results
