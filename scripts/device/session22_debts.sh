#!/usr/bin/env bash
# Session 22: what session 21 owed, in one call. (1) The kernel-vs-reference GPU test at the final kernels
# (test_gpu_triton_matches_reference, not rerun at 6ac80b5) with the accuracy bars; (2) the Q pre-pass and the
# token-block requantization with D a constexpr (the twins of 6ac80b5's change): their bytes against `formats`
# (tests/test_quantize.py -m gpu) and their times against the previous commit's kernels (.gpu/base, same call);
# (3) a paired A/B of the dQ side stream at 32k (session 18 read fwd+bwd 0.99x there, session 21 0.93x), and the
# dQ kernel's 64-key sub-tiles there (its default, 32, was chosen at 8k).
#   git archive HEAD~1 kernels | tar -x -C .gpu/base; bash scripts/device/session22_debts.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=4 phase quantize_gpu 200 $GPU_TESTS tests/test_quantize.py
TAIL=30 phase reference_gpu 300 $GPU_TESTS tests/test_attention_gpu.py -k "triton_matches_reference or accuracy_vs_exact"
BASE=$(base_kernels)
for d in 128 64; do
  TAIL=8 phase "prepass${d}_base" 90 env PYTHONPATH="$BASE" python3 scripts/bench_prepass.py --dim "$d"
  TAIL=8 phase "prepass${d}_new" 90 python3 scripts/bench_prepass.py --dim "$d"
done
echo '{"bwd": {"dq_stream": null}}' > /tmp/serial.json
echo '{"bwd": {"gluon_dq": 64}}' > /tmp/dq64.json
for v in serial dq64; do
  TAIL=8 phase "table32_$v" 240 python3 scripts/bench_attention.py --seqs 32768 --dims 128 --presets fp8 \
    --peers cudnn --modes fwdbwd --rounds 3 --launch "/tmp/$v.json" --out "$R/table32_$v"
done
tar -czf "$OUT/results.tar.gz" -C /tmp results
