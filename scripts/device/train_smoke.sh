#!/usr/bin/env bash
# gpt-125m, 100 steps, bf16, on the carried corpus (.gpu/corpus32k): tokens/s and MFU for docs/benchmarks.md.
# With 2+ GPUs it also runs the same global batch on 2 ranks (FSDP2) for scaling and loss agreement.
set -uo pipefail
source scripts/device/setup.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
C=.gpu/corpus32k
COMMON=(model=gpt-125m precision=bf16 logger=none "data.path=$C" "data.tokenizer=$C/tokenizer.model"
        train.steps=100 train.seq_len=2048 train.micro_batch_size=16 train.tokens_per_step=65536
        train.lr=6e-4 schedule.warmup_steps=10 train.eval_interval=50 train.eval_batches=4
        checkpoint.interval=0 checkpoint.export_safetensors=false logger.log_interval=1)
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv | tee "$OUT/gpu.txt"
git rev-parse HEAD 2>/dev/null | tee "$OUT/commit.txt"
python3 -m flamia_train.train "${COMMON[@]}" run_dir=/tmp/run1 "$@" > "$OUT/train_1gpu.log" 2>&1
echo "1gpu exit $?"; tail -3 "$OUT/train_1gpu.log"; cp /tmp/run1/metrics.jsonl "$OUT/metrics_1gpu.jsonl"
NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count())')
if [ "$NGPU" -ge 2 ]; then
  torchrun --standalone --nproc_per_node=2 -m flamia_train.train "${COMMON[@]}" run_dir=/tmp/run2 "$@" \
    > "$OUT/train_2gpu.log" 2>&1
  echo "2gpu exit $?"; tail -3 "$OUT/train_2gpu.log"; cp /tmp/run2/metrics.jsonl "$OUT/metrics_2gpu.jsonl"
fi
python3 scripts/device/summarize_runs.py "$OUT"/metrics_*.jsonl | tee "$OUT/summary.md"
