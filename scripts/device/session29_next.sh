#!/usr/bin/env bash
# The next device calls after session 28 (one mode a call; each fits the 600 s a call may run):
#   bash scripts/device/session29_next.sh sweep    # dq_from_ds's launch over both dS buffers at 8k, then 16k's table
#   bash scripts/device/session29_next.sh tests1   # the GPU tier, first half (Triton kernels, the forward, accuracy)
#   bash scripts/device/session29_next.sh tests2   # the GPU tier, second half (Gluon backward, relaunch, prefix tests)
#   STEPS=2000 BUDGET=480 bash scripts/device/session28_parity.sh   # the 2,000-step parity pair (resumable: again
#                                                                   # at once while the machine is warm, to finish)
# sweep: `dq_from_ds` reads its buffer at ~3.2 TB/s (bf16) and ~3.0 TB/s (fp8) of the H200's 4.8 (session 28:
# 1354 / 738 µs at 8k); its 8 warps × 3 stages were chosen on an H100 for the bf16 buffer. Each variant's kernel times
# from scripts/launch_gaps.py (`fp8`: the bf16 buffer; `fp8-dsk`'s launch: the fp8 one), two rounds in turn.
set -uo pipefail
source scripts/device/setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader
MODE=${1:-sweep}
WC="python3 scripts/device/with_constants.py"
GPU_V="python3 -m pytest -v -m gpu -s -p no:cacheprovider --tb=short"
SECOND="gluon or ws_ or relaunch or ds_out or stream or dkdv or gluon_dq or fp8_ds"
summary() { grep -E "PASSED|FAILED|ERROR" "$R/$1.log" | grep -oE "PASSED|FAILED|ERROR" | sort | uniq -c
            grep -E "^(FAILED|ERROR)|passed|failed" "$R/$1.log" | tail -20; }
case "$MODE" in
  sweep)
    echo '{"bwd": {"fp8_dq": true}}' > /tmp/dsk.json
    for round in 1 2; do
      for variant in "dq_from_ds.STAGES=3" "dq_from_ds.STAGES=2" "dq_from_ds.STAGES=4" "dq_from_ds.WARPS=4"; do
        tag=${variant//[^A-Za-z0-9]/_}
        TAIL=0 phase "gaps_bf16_${tag}_$round" 50 $WC "$variant" -- scripts/launch_gaps.py --seq 8192 --calls 3
        TAIL=0 phase "gaps_fp8_${tag}_$round" 50 $WC "$variant" -- scripts/launch_gaps.py --seq 8192 --calls 3 \
          --launch /tmp/dsk.json
      done
    done
    for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep -E "dq_from_ds|per call: kernels" "$f" | tail -2; done
    ;;
  tests1) TAIL=0 phase tests1 540 $GPU_V tests/test_attention_gpu.py -k "not ($SECOND)"; summary tests1 ;;
  tests2) TAIL=0 phase tests2 540 $GPU_V tests/test_attention_gpu.py tests/test_causal_safety.py -k "$SECOND or prefix"
          summary tests2 ;;
  *) echo "usage: session29_next.sh sweep|tests1|tests2"; exit 2 ;;
esac
tar -czf "$OUT/results.tar.gz" -C /tmp results
