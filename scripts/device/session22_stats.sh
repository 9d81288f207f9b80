#!/usr/bin/env bash
# Session 22: the dK/dV kernels' off-diagonal loop loads sub-tile j's query statistics before it waits for stage
# j + 1 and issues that sub-tile's Sᵀ and dPᵀ (before: after, at the start of j's elementwise work, where the FMULs
# that scale Sᵀ waited on those loads — 17% of the consumer's stall samples were short scoreboard, session22_final.sh).
# sm_90 SASS of the ws kernel's loop 332 -> 310 instructions, ptxas now interleaving j's exponentials with the issue of
# j + 1's products. The bits against the previous commit's kernels (.gpu/base) and the kernel tests, then the time:
# kernel traces with the dQ kernel on the caller's stream (so each kernel runs alone), base and new in turn, and the
# fwd+bwd speed table, base and new in turn.
#   rm -rf .gpu/base; mkdir -p .gpu/base; git archive HEAD~1 kernels | tar -x -C .gpu/base
#   bash scripts/device/session22_stats.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
BASE=$(base_kernels)
for s in 2048 4096; do
  TAIL=1 phase "dump_base_$s" 90 env PYTHONPATH="$BASE" python3 scripts/device/dump_grads.py save "/tmp/base_$s.pt" --seq $s
  TAIL=1 phase "dump_new_$s" 90 python3 scripts/device/dump_grads.py save "/tmp/new_$s.pt" --seq $s
  TAIL=1 phase "bits_$s" 30 python3 scripts/device/dump_grads.py compare "/tmp/base_$s.pt" "/tmp/new_$s.pt"
done
TAIL=4 phase tests 200 $GPU_TESTS tests/test_attention_gpu.py -k "dkdv_matches or relaunch"
echo '{"bwd": {"dq_stream": null}}' > /tmp/serial.json
for round in 1 2 3; do
  TAIL=1 phase "gaps_base_$round" 60 env PYTHONPATH="$BASE" python3 scripts/launch_gaps.py --seq 8192 --launch /tmp/serial.json
  TAIL=1 phase "gaps_new_$round" 60 python3 scripts/launch_gaps.py --seq 8192 --launch /tmp/serial.json
done
for f in "$R"/gaps_*.log; do echo "== $(basename "$f") $(grep -E "_dkdv_ws_kernel" "$f" | tr -s ' ' | cut -c1-30 | tr '\n' ' ')"; done
for round in 1 2; do
  TAIL=6 phase "table_base_$round" 120 env PYTHONPATH="$BASE" python3 scripts/bench_attention.py --seqs 8192,16384 \
    --dims 128 --presets fp8 --peers cudnn --modes fwdbwd --rounds 3 --out "$R/table_base_$round"
  TAIL=6 phase "table_new_$round" 120 python3 scripts/bench_attention.py --seqs 8192,16384 \
    --dims 128 --presets fp8 --peers cudnn --modes fwdbwd --rounds 3 --out "$R/table_new_$round"
done
tar -czf "$OUT/results.tar.gz" -C /tmp results
