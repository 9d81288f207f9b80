#!/usr/bin/env bash
# Session 19: V's block scale folded into P in the Gluon forward (scripts/fold_v_probe.py), then session19_host.sh's
# checks of the backward's relaunched launches (GPU tests, host time against .gpu/base's kernels).
#   git archive BASE kernels | tar -x -C .gpu/base; bash scripts/device/session19_fold.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=30 phase fold 200 python3 scripts/fold_v_probe.py --seqs 8192 16384 --rounds 3 --calls 16
TAIL=12 phase gpu_tests 200 $GPU_TESTS tests/test_attention_gpu.py -k "relaunch or deferred or ws_dkdv or gluon_dq"
TAIL=6 phase gpu_quantize 60 $GPU_TESTS tests/test_quantize.py -k "delta"
BASE=$(base_kernels)
for round in 1 2; do
  TAIL=3 phase "parts_base_$round" 60 env PYTHONPATH="$BASE" python3 scripts/host_overhead_probe.py --seqs 8192 --parts
  TAIL=3 phase "parts_new_$round" 60 python3 scripts/host_overhead_probe.py --seqs 8192 --parts
done
tar -czf "$OUT/results.tar.gz" -C /tmp results
