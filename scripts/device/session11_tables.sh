#!/usr/bin/env bash
# Session 11: the speed table at S = 8k and 16k both ways (do_bench blocks; single calls alternating between the
# implementations), the SM clock and power sampled beside them; then the GPU tier of test_attention_gpu.py and the
# causal prefix tests on the Gluon kernels at this commit.
set -uo pipefail
source scripts/device/setup.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv -lms 50 \
  > "$R/smi.csv" 2>&1 &
SMI=$!
B="python3 scripts/bench_attention.py --seqs 8192,16384 --dims 128 --presets fp8 --peers cudnn,flash --rounds 3"
TAIL=14 phase bench_dobench 170 $B --out "$R/dobench"
TAIL=14 phase bench_alternating 170 $B --timing alternating --calls 40 --out "$R/alternating"
kill $SMI
TAIL=4 phase tests_attn 240 $GPU_TESTS tests/test_attention_gpu.py
TAIL=4 phase tests_causal 60 $GPU_TESTS tests/test_causal_safety.py -k gluon
tar -czf "$OUT/results.tar.gz" -C /tmp results
