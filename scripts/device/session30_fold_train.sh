#!/usr/bin/env bash
# Session 30, call 8 (~2.5 minutes): does fold_k change training? The same run as call 7's (the fp8 recipe, gpt-125m
# with 6 heads of 128, seed 1234, 2000-step schedule) with fold_k off (attention_bwd.FOLD_K=False), time-boxed; its
# per-step losses are compared with call 7's log (training here is deterministic: call 7's two runs agreed to the
# last digit).
#   bash scripts/device/session30_fold_train.sh
set -uo pipefail
source scripts/device/setup.sh
timeout -k 10 110 python3 scripts/device/with_constants.py attention_bwd.FOLD_K=False -- -m flamia_train.train \
  model=gpt-125m precision=fp8 logger=none logger.log_interval=1 run_dir=/tmp/run_nofold resume=auto train.steps=2000 \
  train.seq_len=1024 train.micro_batch_size=4 train.lr=0.0006 schedule.warmup_steps=200 train.eval_interval=250 \
  train.eval_batches=10 checkpoint.interval=500 checkpoint.keep=1 checkpoint.export_safetensors=false \
  parallel.device=cuda data.path=.gpu/corpus32k data.tokenizer=.gpu/corpus32k/tokenizer.model \
  data.cache_dir=/tmp/tok_nofold model.n_heads=6 model.n_kv_heads=6 train.seed=1234 > "$R/nofold.log" 2>&1
grep -E "^with|eval step|guard" "$R/nofold.log" | head -12
grep -E "^step" "$R/nofold.log" | tail -3
tar -czf "$OUT/results.tar.gz" -C /tmp results
