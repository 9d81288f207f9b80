#!/usr/bin/env bash
# Session 20: the fp8 forward in chunks of heads with each chunk's key-side pass on a high-priority side stream ahead
# of the forward kernels (scripts/chunked_forward_probe.py), against the one-launch forward and cuDNN.
#   bash scripts/device/session20_chunks.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=30 phase chunks 400 python3 scripts/chunked_forward_probe.py --seqs 8192 16384 --chunks 2 4 8 16
tar -czf "$OUT/results.tar.gz" -C /tmp results
