#!/usr/bin/env bash
# Session 18: the host path's cuts (cached layouts, carved allocations, ...) against .gpu/base's kernels (the
# session's start): host time per step, then the speed table's single-call readings with and without the host
# ahead, for both in turn; then the GPU tests of the forward and backward kernels.
#   git archive e690cd1 kernels | tar -x -C .gpu/base; bash scripts/device/session18_ab.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
BASE=$(base_kernels)
TAIL=40 phase parts_new 200 python3 scripts/host_overhead_probe.py --seqs 8192 --parts ${EXTRA:-}
TAIL=14 phase parts_base 200 env PYTHONPATH="$BASE" python3 scripts/host_overhead_probe.py --seqs 8192 --parts
TAIL=20 phase host_base 300 env PYTHONPATH="$BASE" python3 scripts/host_overhead_probe.py --seqs 8192 16384 --calls 12
TAIL=20 phase host_new 300 python3 scripts/host_overhead_probe.py --seqs 8192 16384 --calls 12
[ -n "${TESTS:-}" ] && TAIL=8 phase tests 400 $GPU_TESTS tests/test_attention_gpu.py -k "$TESTS"
tar -czf "$OUT/results.tar.gz" -C /tmp results
