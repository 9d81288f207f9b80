#!/usr/bin/env bash
# Second device call of 2026-11-30: the linear _scaled_mm layout fix, the long-context run with its
# parallel-vs-AR gap, and the kernel-vs-reference diagnostics (tracebacks this time), time-boxed.
set -uo pipefail
source scripts/device/setup.sh
C=.gpu/corpus32k
TAIL=6 phase linear_gpu 60 python3 -m pytest -q -m gpu tests/test_linear.py -p no:cacheprovider
TAIL=8 phase longctx 110 python3 scripts/bench_context.py --model gpt-125m --schedule long-context --steps 40 \
  --run-dir /tmp/lc125m --out "$R/longctx.json" -- precision=fp8 "data.path=$C" "data.tokenizer=$C/tokenizer.model" \
  train.seq_len=2048 train.tokens_per_step=65536 schedule.context.unit=step \
  'schedule.context.stages=[{start:0,seq_len:2048},{start:20,seq_len:8192,rope_theta:100000},{start:30,seq_len:16384,rope_theta:500000}]'
TAIL=14 phase evalctx 60 python3 scripts/eval_context.py /tmp/lc125m/checkpoints/step_00000040 --device cuda \
  --data-path "$C" --seq-len 16384 --batches 2 --micro-batch 1 --ar-seqs 2 --ar-len 512 --attention fp8 \
  --out "$R/evalctx.json"
TAIL=25 phase kernels_diag 70 python3 -m pytest -q -m gpu tests/test_attention_gpu.py -k "prepass or shared_operands" \
  --tb=line -p no:cacheprovider
TAIL=25 phase docmask_gpu 60 python3 -m pytest -q -m gpu tests/test_attention_docmask.py --tb=line -p no:cacheprovider
tar -czf "$OUT/results.tar.gz" -C /tmp results
