#!/usr/bin/env bash
# Session 30, call 4 (~4 minutes): fold_k with its scales read early, against the copies pass, kernel by kernel.
#   1. the fold_k bit-identity tests;
#   2. scripts/launch_gaps.py at 8k, fold_k on (the default) and off in turn, two rounds each: the dK/dV kernel's and
#      the copies' times in the same call;
#   3. dq_from_ds with K's tile read once a program (`dq_from_ds.K_ONCE`, a probe): the buffer's read rate alone;
#   4. the 8k / 16k fwd+bwd table, "[launch]" rows without fold_k.
#   bash scripts/device/session30_fold2.sh
set -uo pipefail
source scripts/device/setup.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
TAIL=0 phase fold_tests 120 python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short tests/test_attention_gpu.py \
  -k "fold_k"
grep -E "PASSED|FAILED|ERROR|bit-identical" "$R/fold_tests.log" | tail -8
echo '{"bwd": {"fold_k": false}}' > /tmp/nofold.json
for round in 1 2; do
  TAIL=0 phase "gaps_fold_$round" 60 python3 scripts/launch_gaps.py --seq 8192 --calls 3
  TAIL=0 phase "gaps_nofold_$round" 60 python3 scripts/launch_gaps.py --seq 8192 --calls 3 --launch /tmp/nofold.json
  for f in fold nofold; do
    echo "-- $f round $round"; grep -A 12 "training step" "$R/gaps_${f}_$round.log" | grep -E "copies|dkdv|dq_from|per call"
  done
done
TAIL=8 phase probe 80 python3 scripts/device/dq_from_ds_probe.py --rounds 3 --buffers bf16 --variants 5
TAIL=12 phase table 150 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 \
  --peers cudnn --modes fwdbwd --rounds 3 --launch /tmp/nofold.json --out /tmp/results/table
tar -czf "$OUT/results.tar.gz" -C /tmp results
