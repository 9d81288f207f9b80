#!/usr/bin/env bash
# Session 23: the split dK/dV kernel (attention_dkdv_split, launch option ws_dkdv = "split": one program per SM, a P
# warpgroup (Sᵀ, P, dV) and a dS warpgroup (dPᵀ, dSᵀ, dK), each running three sub-tiles at once). Its bits against
# the fused Gluon kernel, then the time: the dK/dV kernel alone (launch_gaps.py with the dQ kernel on the caller's
# stream), ws and split in turn, fwd+bwd against cuDNN with both in the same run, and Nsight Compute's stall samples
# per SASS line of the split kernel at 8k.
# Runs at 0872ea4, where the split kernel exists (reverted after: slower than attention_dkdv_ws, docs/benchmarks.md).
#   bash scripts/device/session23_split.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=3 phase bits 170 $GPU_TESTS tests/test_attention_gpu.py -k "ws_dkdv_matches"
grep -E "split.*bit-identical" "$R/bits.log" | cut -c1-150
echo '{"bwd": {"dq_stream": null}}' > /tmp/ws.json
echo '{"bwd": {"dq_stream": null, "ws_dkdv": "split"}}' > /tmp/split.json
echo '{"bwd": {"ws_dkdv": "split"}}' > /tmp/split_side.json
for round in 1 2; do
  TAIL=1 phase "gaps_ws_$round" 50 python3 scripts/launch_gaps.py --seq 8192 --launch /tmp/ws.json
  TAIL=1 phase "gaps_split_$round" 50 python3 scripts/launch_gaps.py --seq 8192 --launch /tmp/split.json
done
for f in "$R"/gaps_*.log; do echo "== $(basename "$f") $(grep -E "dkdv_(ws|split)_kernel|_dq_gluon" "$f" | tr -s ' ' | cut -c1-24 | tr '\n' ' ')"; done
TAIL=8 phase table 200 python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 --peers cudnn \
  --modes fwdbwd --rounds 3 --launch /tmp/split_side.json --out "$R/table"
TAIL=2 phase ncu 150 ncu --clock-control none --kernel-name _dkdv_split_kernel --launch-skip 1 --launch-count 1 \
  --section WarpStateStats --section SourceCounters --section SpeedOfLight -o "$R/split" \
  python3 scripts/profile_attention_step.py --seq 8192 --batch-heads 4x16 --launch /tmp/split.json
TAIL=30 phase ncu_details 60 ncu -i "$R/split.ncu-rep" --print-details all --section WarpStateStats --section SpeedOfLight
TAIL=1 phase sass 120 ncu -i "$R/split.ncu-rep" --page source --csv --print-source sass
gzip "$R/sass.log"; rm -f "$R/split.ncu-rep"
tar -czf "$OUT/results.tar.gz" -C /tmp results
