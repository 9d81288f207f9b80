#!/usr/bin/env bash
# Session 18: how much of the speed table's single-call readings is the GPU waiting for the host
# (scripts/host_overhead_probe.py: fp8 against cuDNN, as the table times them and with the host ahead).
#   bash scripts/device/session18_host.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=40 phase host 400 python3 scripts/host_overhead_probe.py --seqs 8192 16384 --calls 16 --profile
tar -czf "$OUT/results.tar.gz" -C /tmp results
