#!/usr/bin/env bash
# Session 36: the table (and the fast path's GPU tests) on an H200 only; on any other card it stops at once,
# so a call that gets an H100 spends no more device time on a fourth H100 table of the same kernels.
#   bash scripts/device/session36_h200_only.sh   (carry .gpu)
set -uo pipefail
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  nvidia-smi --query-gpu=name --format=csv,noheader
  echo "not an H200: nothing run"
  exit 0
fi
exec bash scripts/device/session35_call5.sh
