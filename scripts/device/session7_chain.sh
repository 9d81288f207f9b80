#!/usr/bin/env bash
# Session 7's third device call (1× H200, ~300 s): the Gluon forward with one chained accumulator
# (pipe 3: 168 registers, three programs per SM) against the Triton kernel's CHAIN launch bit for bit,
# its accuracy against exact attention, its time next to the Triton default and the fresh-product Gluon
# kernel, the speed table with it, and its hardware counters (occupancy, issue).
#   bash scripts/device/session7_chain.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=40 phase tests 150 $T tests/test_attention_gpu.py -k "gluon and (chain or accuracy or launch_option)"
TAIL=20 phase profile 80 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd --profile --fwd-configs 4x3:bm64,4x3:gluon,4x2:gluon:chain --out "$R/profile"
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
echo '{"fwd": {"gluon": true, "pipe": 3, "num_stages": 2}}' > "$R/chain.json"
TAIL=30 phase bench 100 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn --launch "$R/chain.json" --out "$R/bench"
TAIL=60 phase ncu 90 ncu --clock-control none --kernel-name 'regex:_fwd_gluon_kernel' --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats \
  python3 scripts/profile_attention_step.py --seq 8192 --batch-heads 4x16 --launch "$R/chain.json"
tar -czf "$OUT/results.tar.gz" -C /tmp results
