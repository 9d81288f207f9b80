#!/usr/bin/env bash
# Issue 8, multi-GPU FSDP2: gpt-1b with precision=flamia at seq 2048 on the carried corpus (.gpu/corpus32k),
#   1. one GPU (gradient accumulation 2) and NPROC GPUs under torchrun (accumulation 1): the same global
#      batch (train.tokens_per_step), seed and data order; tokens/s, tokens/s per GPU, scaling efficiency,
#      per-step loss agreement;
#   2. the NPROC-GPU run checkpoints at step CKPT; a 1-GPU run resumes from it to step STEPS (the same LR
#      curve: train.steps is the same) and its losses are compared with both uninterrupted runs.
# Each phase is time-boxed; everything lands in $OUT/results.tar.gz (plus $OUT/summary.md).
#   bash scripts/device/multi_gpu.sh                           # on the 2x H200 machine (bounded by ~400 s)
# Every knob is an environment variable with the GPU value as default. CPU stand-ins (gloo, 2 processes):
#   PATH=/work/venv/bin:$PATH MODEL=tiny DEVICE=cpu CORPUS= STEPS=8 CKPT=5 SEQ=256 MB=2 T1=500 T2=400 T3=300 \
#     OUT=/tmp/mg_out bash scripts/device/multi_gpu.sh         # the embedded corpus (vocab 8192)
#   ... THREADS=1 EXTRA="model.vocab_size=32768" (CORPUS unset)  # the carried .gpu/corpus32k
# NVFP4 is emulated on Hopper (slow): this measures scaling and resume, not speed.
set -uo pipefail
T_START=$SECONDS
source scripts/device/setup.sh
exec > >(tee "$R/console.txt") 2>&1   # the phase lines (exit code, seconds) come back too
MODEL=${MODEL:-gpt-1b}
PRECISION=${PRECISION:-flamia}
DEVICE=${DEVICE:-cuda}            # parallel.device: cuda fails loudly where no GPU is visible
NPROC=${NPROC:-2}
SEQ=${SEQ:-2048}
MB=${MB:-4}                       # rows per rank per micro-batch (gpt-1b, 2k, no AC: ~40 GB estimated)
TOKENS=${TOKENS:-$((NPROC * MB * SEQ))}   # global tokens per optimizer step: 1 GPU accumulates NPROC micro-batches
STEPS=${STEPS:-20}
CKPT=${CKPT:-16}                  # the NPROC-GPU checkpoint the 1-GPU run resumes from (steps CKPT+1..STEPS)
WARMUP=${WARMUP:-4}               # first steps of each process left out of the tokens/s median
LR=${LR:-3e-4}
AC=${AC:-none}                    # parallel.activation_checkpoint: none | selective | full
CORPUS=${CORPUS-.gpu/corpus32k}   # empty: the default embedded corpus (data=stdlib, built on first use)
W=${WORK:-/tmp/mg}                # run directories (checkpoints: ~12 GB each for gpt-1b)
T1=${T1:-150}; T2=${T2:-120}; T3=${T3:-90}    # time boxes (s): 1-GPU, NPROC-GPU, resume
THREADS=${THREADS:-8}             # OMP threads per torchrun rank (CPU init of the full-size twin)
read -ra EXTRA_ARGS <<< "${EXTRA:-}"
DATA=()
[ -n "$CORPUS" ] && DATA=("data.path=$CORPUS" "data.tokenizer=$CORPUS/tokenizer.model")
COMMON=("model=$MODEL" "precision=$PRECISION" logger=none logger.log_interval=1 "${DATA[@]}"
        "train.steps=$STEPS" "train.seq_len=$SEQ" "train.micro_batch_size=$MB" "train.tokens_per_step=$TOKENS"
        "train.lr=$LR" schedule.warmup_steps=4 train.seed=1234 train.eval_batches=0 train.spike_sigma=0
        "parallel.device=$DEVICE" "parallel.activation_checkpoint=$AC"
        checkpoint.export_safetensors=false checkpoint.keep=2 "${EXTRA_ARGS[@]}")
CK=$W/two/checkpoints/step_$(printf %08d "$CKPT")
{
  echo "date: $(date -u +%FT%TZ)"; echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "python3: $(command -v python3)  torchrun: $(command -v torchrun)"
  echo "env: MODEL=$MODEL PRECISION=$PRECISION DEVICE=$DEVICE NPROC=$NPROC SEQ=$SEQ MB=$MB TOKENS=$TOKENS"
  echo "     STEPS=$STEPS CKPT=$CKPT WARMUP=$WARMUP LR=$LR AC=$AC CORPUS=$CORPUS THREADS=$THREADS EXTRA=${EXTRA:-}"
  echo "overrides: ${COMMON[*]}"
  command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda devices", torch.cuda.device_count())'
} > "$R/env.txt" 2>&1
cat "$R/env.txt"
rm -rf "$W"; mkdir -p "$W"

TAIL=4 phase one_gpu "$T1" python3 -m flamia_train.train "${COMMON[@]}" "run_dir=$W/one" resume=never \
  checkpoint.interval=0
rm -rf "$W/one/checkpoints"   # its final checkpoint is not needed: free the disk
TAIL=4 phase multi_gpu "$T2" env "OMP_NUM_THREADS=$THREADS" torchrun --standalone "--nproc_per_node=$NPROC" \
  -m flamia_train.train "${COMMON[@]}" "run_dir=$W/two" resume=never "checkpoint.interval=$CKPT"
ls "$W/two/checkpoints" > "$R/checkpoints_multi_gpu.txt" 2>&1
TAIL=6 phase resume "$T3" python3 -m flamia_train.train "${COMMON[@]}" "run_dir=$W/resume" "resume=$CK" \
  checkpoint.interval=0

for run in one two resume; do cp "$W/$run/metrics.jsonl" "$R/metrics_$run.jsonl" 2>/dev/null; done
TAIL=200 phase summary 60 python3 scripts/device/summarize_multi_gpu.py --one "$W/one" --two "$W/two" \
  --resume "$W/resume" --resume-log "$R/resume.log" --ckpt-step "$CKPT" --nproc "$NPROC" --warmup "$WARMUP" \
  --title "Issue 8: $MODEL, precision=$PRECISION, seq $SEQ, $TOKENS tokens/step, 1 vs $NPROC GPUs, resume $NPROC→1" \
  --json "$R/summary.json"
cp "$R/summary.log" "$R/summary.md"; cp "$R/summary.md" "$OUT/summary.md"
[ "${KEEP:-0}" = 1 ] || rm -rf "$W"/*/checkpoints   # ~36 GB for gpt-1b; KEEP=1 keeps them
echo "total wall $((SECONDS - T_START)) s" | tee -a "$R/env.txt"
tar -czf "$OUT/results.tar.gz" -C "$(dirname "$R")" "$(basename "$R")"
ls -la "$OUT"
