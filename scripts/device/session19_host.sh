#!/usr/bin/env bash
# Session 19: the backward's Triton launches (dO's pass, the query and key copies) through `relaunch.Relaunch`
# with their outputs carved from one allocation each. GPU tests (bit-identity of relaunched launches, the copies,
# the dO pass), then the host time of a backward and of the forward's steps, .gpu/base's kernels (the commit
# before) and this tree's in turn, in one call.
#   git archive BASE kernels | tar -x -C .gpu/base; bash scripts/device/session19_host.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=12 phase gpu_tests 240 $GPU_TESTS tests/test_attention_gpu.py -k "relaunch or deferred or ws_dkdv or gluon_dq"
TAIL=6 phase gpu_quantize 120 $GPU_TESTS tests/test_quantize.py -k "delta"
BASE=$(base_kernels)
for round in 1 2; do
  TAIL=14 phase "parts_base_$round" 90 env PYTHONPATH="$BASE" python3 scripts/host_overhead_probe.py --seqs 8192 --parts
  TAIL=14 phase "parts_new_$round" 90 python3 scripts/host_overhead_probe.py --seqs 8192 --parts
done
TAIL=20 phase isolated 120 python3 scripts/host_overhead_probe.py --seqs 8192 16384 --calls 16
tar -czf "$OUT/results.tar.gz" -C /tmp results
