#!/usr/bin/env bash
# Session 11: wider Gluon programs, so each streamed tile is read from L2 once for twice the rows.
# dK/dV at 128 keys (two warpgroups sharing each query sub-tile) and dQ at 128 rows (two sharing each key
# sub-tile), against 64 (BN / DQ_BM, the former launch); the forward at 128 rows (one program per SM at 168
# registers) against 64. Bit-identity to the Triton kernels first, then per-kernel times at S = 8k, interleaved.
set -uo pipefail
source scripts/device/setup.sh
W="python3 scripts/device/with_constants.py"
OLD="attention_bwd_gluon.BN=64 attention_bwd_gluon.DQ_BM=64"
ST="attention_bwd_gluon.STAGES=5 attention_bwd_gluon.DQ_STAGES={32:4,64:3}"
F128="attention_fwd_gluon.BM=128 attention_fwd_gluon.CHAIN_STAGES=3"
TAIL=6 phase tests_bwd 240 $GPU_TESTS tests/test_attention_gpu.py -k "gluon_dkdv or gluon_dq or deferred_copies"
TAIL=6 phase tests_fwd128 180 $W $F128 -- $GPU_TESTS_ARGS tests/test_attention_gpu.py -k "gluon_forward_matches"
for round in 1 2; do
  TAIL=1 phase "gaps_old_$round" 60 $W $OLD -- scripts/launch_gaps.py --seq 8192
  TAIL=1 phase "gaps_new_$round" 60 python3 scripts/launch_gaps.py --seq 8192
  TAIL=1 phase "gaps_stages_$round" 60 $W $ST -- scripts/launch_gaps.py --seq 8192
  TAIL=1 phase "gaps_f128_$round" 60 $W $F128 -- scripts/launch_gaps.py --seq 8192
done
for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep "per call\|fwd_gluon\|dq_gluon\|dkdv" "$f" | tail -5; done
tar -czf "$OUT/results.tar.gz" -C /tmp results
