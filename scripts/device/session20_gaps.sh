#!/usr/bin/env bash
# Session 20: every kernel of one fp8 fwd+bwd call at 8k and 16k with the idle gaps between them (the speed table's
# fwd+bwd reads ~0.7 ms more than the kernels of a training step's profile add up to).
#   bash scripts/device/session20_gaps.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=60 phase gaps8 120 python3 scripts/launch_gaps.py --seq 8192 --calls 3
TAIL=60 phase gaps16 120 python3 scripts/launch_gaps.py --seq 16384 --calls 3
tar -czf "$OUT/results.tar.gz" -C /tmp results
