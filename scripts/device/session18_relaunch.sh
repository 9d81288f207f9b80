#!/usr/bin/env bash
# Session 18: the kernels launched through relaunch.Relaunch — the GPU tests of every Gluon kernel and of the
# relaunched call against Triton's launches, then the forward's host time per step against .gpu/base's kernels.
#   git archive e690cd1 kernels | tar -x -C .gpu/base; bash scripts/device/session18_relaunch.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
BASE=$(base_kernels)
TAIL=8 phase tests 200 $GPU_TESTS tests/test_attention_gpu.py \
  -k "relaunched or gluon_forward or fused_q or ws_dkdv or gluon_dq or deferred"
TAIL=40 phase parts_new 60 python3 scripts/host_overhead_probe.py --seqs 8192 --parts --launch-costs
TAIL=14 phase parts_base 60 env PYTHONPATH="$BASE" python3 scripts/host_overhead_probe.py --seqs 8192 --parts
tar -czf "$OUT/results.tar.gz" -C /tmp results
