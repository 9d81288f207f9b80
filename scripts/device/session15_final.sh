#!/usr/bin/env bash
# Session 15, the last calls, with the warp-specialized dK/dV kernel the fast path's default:
#   bash scripts/device/session15_final.sh table   the speed table (every peer at 8k / 16k / 32k, single calls
#                                                  alternating) and the causal-safety tests of the Gluon kernels
#   bash scripts/device/session15_final.sh tests   the whole GPU tier of tests/test_attention_gpu.py, and the
#                                                  Gluon backward's causal-safety tests (both dK/dV kernels)
# (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
case "${1:-table}" in
  table)
    TAIL=24 phase bench 330 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
      --peers cudnn,flash,flex --rounds 3 --out "$R/bench"
    TAIL=4 phase tests_causal 200 $GPU_TESTS tests/test_causal_safety.py -k gluon ;;
  tests)
    TAIL=6 phase tests_causal 100 $GPU_TESTS tests/test_causal_safety.py -k gluon_backward
    TAIL=40 phase tests_attention 470 $GPU_TESTS tests/test_attention_gpu.py ;;
esac
tar -czf "$OUT/results.tar.gz" -C /tmp results
