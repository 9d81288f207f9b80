#!/usr/bin/env bash
# Closes issues 4, 5 and 8 in one device call (2× H200, no network, the whole script within WALL = 530 s):
#   issue 8 (multi-GPU, `multigpu`): gpt-1b, precision=bf16, seq 2048, 16,384 tokens per step, 20 steps at
#     lr 1e-4 after 8 warm-up steps (the last run's 3e-4 after 4 spiked at step 7): 2 GPUs under torchrun
#     (FSDP2, accumulation 1), then 1 GPU (accumulation 2) on the same global batch, seed and data order;
#     summarize_multi_gpu.py prints tokens/s, scaling efficiency and the per-step losses with the criterion
#     max_s |L_2(s) − L_1(s)| / |L_1(s)| ≤ MG_TOL (1e-2) as a PASS/FAIL line. bf16 because NVFP4's stochastic
#     rounding draws differ per rank.
#   issue 4 (precision recipes, `recipes`): bench_recipes.py, gpt-125m, 300 steps of 1024 × 8 tokens, presets
#     bf16 then nvfp4 in ONE process (nvfp4 ~1.04 s/step on the H200: ~375 s in all), alone on its GPU.
#   issue 5 (long context, `longctx`): gpt-1b under a context schedule 2048 → 8192 → 32768 tokens (4 steps
#     each, 32,768 tokens per step: 4 × 2048, 1 × 8192 then 1 × 32768 rows per forward), one process per
#     variant PRECISION:AC[:LONGEST] (LC_VARIANTS, in order of value: fp8 with full checkpointing, fp8 without,
#     bf16 without, fp8 full with a 65536 stage added, fp8 selective); per stage tokens/s and peak memory
#     (torch.cuda.max_memory_allocated, reset at each stage change) next to an estimate from the model shape
#     (summarize_longctx.py). Variants run while time is left; each is time-boxed.
# Timeline of `all` on 2 GPUs: [multigpu 2-GPU run on both] → GPU 1: recipes until the end; GPU 0: the
# multigpu 1-GPU run, then long-context variants until the end. On 1 GPU: recipes, then long-context
# variants in the time left; the 2-GPU comparison is skipped (said in the output).
#   FLAMIA_COMMIT=<sha> bash scripts/device/close_out.sh [all|recipes|longctx|multigpu]
# Expected wall on 2× H200 (setup ~10 s): all ≈ 510 s (≤ WALL 530: multigpu 2-GPU ~50 s, then recipes ~375 s
# on GPU 1 while GPU 0 runs the 1-GPU run ~50 s and long-context variants until WALL − 20); recipes ≈ 400 s;
# longctx ≈ 250 s (the variants split over both GPUs); multigpu ≈ 120 s. Give each device call a 600 s limit.
# Results: $OUT/results.tar.gz (results/: console.txt, logs, recipes_nvfp4/recipes.{json,md}, multigpu.md +
# .json, longctx.md + .json, metrics_*.jsonl), re-packed after every phase, plus $OUT/summary.md.
# Knobs (environment, GPU values by default): WALL, DEVICE (cuda|cpu), NGPU, CORPUS (empty: the embedded
# corpus), WORK, THREADS; REC_{MODEL,STEPS,SEQ,MB,PRESETS,EXTRA,GPU}; MG_{MODEL,PRECISION,NPROC,SEQ,MB,TOKENS,
# STEPS,LR,WARMUP,AC,TOL,T1,T2,EXTRA}, REC_NEED; LC_{MODEL,VARIANTS,STAGES,STAGE_STEPS,MB0,TOKENS,LR,BOX,MIN,EXTRA}.
# CPU dry run (gloo, stand-in sizes), from the repo root:
#   PATH=/work/venv/bin:$PATH OUT=/tmp/co_out WORK=/tmp/co DEVICE=cpu NGPU=2 WALL=900 THREADS=1 \
#     REC_MODEL=tiny REC_STEPS=6 REC_SEQ=128 REC_MB=2 REC_EXTRA=model.vocab_size=32768 \
#     MG_MODEL=tiny MG_SEQ=128 MG_MB=2 MG_STEPS=6 MG_WARMUP=2 MG_EXTRA=model.vocab_size=32768 \
#     LC_MODEL=tiny LC_STAGES="128 256 512" LC_STAGE_STEPS=3 LC_MB0=2 LC_EXTRA=model.vocab_size=32768 \
#     LC_VARIANTS="fp8:full fp8:none" LC_BOX=300 bash scripts/device/close_out.sh all
set -uo pipefail
T0=$(date +%s)
MODE=${1:-all}
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete   # this call's results only (a warm machine keeps /tmp between calls)
exec > >(tee -a "$R/console.txt") 2>&1
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}

WALL=${WALL:-530}                  # seconds for the whole script, setup and packing included
DEVICE=${DEVICE:-cuda}             # parallel.device / bench_recipes --device (cpu for a dry run)
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
CORPUS=${CORPUS-.gpu/corpus32k}    # empty: the default embedded corpus
W=${WORK:-/tmp/close_out}          # run directories and token caches
THREADS=${THREADS:-8}              # OMP threads of the gpt-1b processes (their CPU-side init)
# issue 4
REC_MODEL=${REC_MODEL:-gpt-125m} REC_STEPS=${REC_STEPS:-300} REC_SEQ=${REC_SEQ:-1024} REC_MB=${REC_MB:-8}
REC_PRESETS=${REC_PRESETS:-bf16 nvfp4} REC_EXTRA=${REC_EXTRA:-}
# issue 8
MG_MODEL=${MG_MODEL:-gpt-1b} MG_PRECISION=${MG_PRECISION:-bf16} MG_NPROC=${MG_NPROC:-2}
MG_SEQ=${MG_SEQ:-2048} MG_MB=${MG_MB:-4} MG_STEPS=${MG_STEPS:-20} MG_LR=${MG_LR:-1e-4} MG_WARMUP=${MG_WARMUP:-8}
MG_TOKENS=${MG_TOKENS:-$((MG_NPROC * MG_MB * MG_SEQ))}   # global tokens per step: 1 GPU accumulates MG_NPROC
MG_AC=${MG_AC:-none} MG_TOL=${MG_TOL:-1e-2} MG_T1=${MG_T1:-120} MG_T2=${MG_T2:-90} MG_EXTRA=${MG_EXTRA:-}
REC_NEED=${REC_NEED:-420}          # `all`: seconds kept for the recipes after the 2-GPU run (deadline + 45)
# issue 5
LC_MODEL=${LC_MODEL:-gpt-1b}
LC_VARIANTS=${LC_VARIANTS:-fp8:full fp8:none bf16:none fp8:full:65536 fp8:selective}
LC_STAGES=${LC_STAGES:-2048 8192 32768} LC_STAGE_STEPS=${LC_STAGE_STEPS:-4}
LC_MB0=${LC_MB0:-4}                # rows per forward at the first length: the token budget of a forward
LC_TOKENS=${LC_TOKENS:-}           # tokens per step; empty: max(longest length, LC_MB0 × first length)
LC_LR=${LC_LR:-1e-4} LC_BOX=${LC_BOX:-180} LC_MIN=${LC_MIN:-60} LC_EXTRA=${LC_EXTRA:-}

DATA=()
[ -n "$CORPUS" ] && DATA=("data.path=$CORPUS" "data.tokenizer=$CORPUS/tokenizer.model")
read -ra REC_EXTRA_ARGS <<< "$REC_EXTRA"
read -ra MG_EXTRA_ARGS <<< "$MG_EXTRA"
read -ra LC_EXTRA_ARGS <<< "$LC_EXTRA"
now() { echo $(($(date +%s) - T0)); }
left() { echo $((WALL - $(now) - ${1:-0})); }   # seconds left, keeping $1 for what comes after
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }
pack() {  # the results so far into $OUT/results.tar.gz (written aside, then renamed: jobs pack concurrently)
  local tmp="$OUT/.results_$BASHPID.tgz"
  tar -czf "$tmp" -C "$(dirname "$R")" "$(basename "$R")" 2>/dev/null && mv -f "$tmp" "$OUT/results.tar.gz"
}
# box NAME SECONDS CMD...: run CMD time-boxed (SIGTERM, then SIGKILL 15 s later) into $R/NAME.log, whose
# last line then says "close_out: exit CODE after S s"; prints the same and the log's last ${TAIL:-6} lines.
box() {
  local name=$1 secs=$2 t=$(($(date +%s))); shift 2
  timeout -k 15 "$secs" "$@" > "$R/$name.log" 2>&1
  local code=$?
  echo "close_out: exit $code after $(($(date +%s) - t)) s" >> "$R/$name.log"
  echo "=== $name exit $code ($(($(date +%s) - t)) s, box $secs s, at $(now) s)"
  grep -v '^step \|^ *[0-9]\+ \+[a-z0-9=,-]\+ \|^layer \|^lm_head \|tokenizing\|it/s\]$' "$R/$name.log" \
    | tail -n "${TAIL:-6}"
}

mkdir -p "$W"
{
  echo "date: $(date -u +%FT%TZ)  commit: $FLAMIA_COMMIT  mode: $MODE  GPUs: $NGPU  wall budget: $WALL s"
  echo "python3: $(command -v python3)  torchrun: $(command -v torchrun)"
  command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,memory.total,clocks.sm --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda devices", torch.cuda.device_count())'
  env | grep -E '^(REC|MG|LC)_|^(WALL|DEVICE|NGPU|CORPUS|WORK|THREADS)=' | sort
} > "$R/env.txt" 2>&1
cat "$R/env.txt"
GPU_GIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 2>/dev/null \
  | awk '{printf "%.1f", $1 / 1024}')

# ---- issue 4: bf16 + nvfp4 in one bench_recipes process, on GPU $1 with a deadline of $2 s ----------------
recipes() {
  local gpu=$1 budget=$2
  echo "--- recipes on GPU $gpu: $REC_PRESETS, $REC_MODEL, $REC_STEPS steps of $REC_SEQ × $REC_MB, deadline $budget s"
  CUDA_VISIBLE_DEVICES=$gpu TAIL=16 box recipes_nvfp4 $((budget + 30)) python3 scripts/bench_recipes.py \
    --model "$REC_MODEL" --steps "$REC_STEPS" --seq-len "$REC_SEQ" --micro-batch "$REC_MB" --device "$DEVICE" \
    ${CORPUS:+--corpus "$CORPUS"} --no-plot --presets $REC_PRESETS --out "$R/recipes_nvfp4" --deadline "$budget" \
    --extra "data.cache_dir=$W/tok_recipes" "${REC_EXTRA_ARGS[@]}"
}

# ---- issue 8: the same global batch on MG_NPROC GPUs and on one ------------------------------------------
MG_COMMON=("model=$MG_MODEL" "precision=$MG_PRECISION" logger=none logger.log_interval=1 "${DATA[@]}"
           "data.cache_dir=$W/tok_mg" "train.steps=$MG_STEPS" "train.seq_len=$MG_SEQ" "train.micro_batch_size=$MG_MB"
           "train.tokens_per_step=$MG_TOKENS" "train.lr=$MG_LR" "schedule.warmup_steps=$MG_WARMUP" train.seed=1234
           train.eval_batches=0 train.spike_sigma=0 "parallel.device=$DEVICE" "parallel.activation_checkpoint=$MG_AC"
           resume=never checkpoint.interval=0 checkpoint.export_safetensors=false "${MG_EXTRA_ARGS[@]}")
mg_multi() {  # both GPUs
  echo "--- multigpu: $MG_NPROC GPUs, $MG_MODEL $MG_PRECISION, $MG_TOKENS tokens/step, $MG_STEPS steps, lr $MG_LR"
  rm -rf "$W/mg_multi"
  TAIL=3 box mg_multi "$1" env "OMP_NUM_THREADS=$THREADS" torchrun --standalone "--nproc_per_node=$MG_NPROC" \
    scripts/device/train_nockpt.py "${MG_COMMON[@]}" "run_dir=$W/mg_multi"
  cp "$W/mg_multi/metrics.jsonl" "$R/metrics_mg_multi.jsonl" 2>/dev/null
}
mg_one() {  # GPU $1, box $2
  echo "--- multigpu: 1 GPU ($1), accumulation $MG_NPROC, same global batch"
  rm -rf "$W/mg_one"
  CUDA_VISIBLE_DEVICES=$1 OMP_NUM_THREADS=$THREADS TAIL=3 box mg_one "$2" python3 scripts/device/train_nockpt.py \
    "${MG_COMMON[@]}" "run_dir=$W/mg_one"
  cp "$W/mg_one/metrics.jsonl" "$R/metrics_mg_one.jsonl" 2>/dev/null
}
mg_summary() {
  python3 scripts/device/summarize_multi_gpu.py --one "$W/mg_one" --two "$W/mg_multi" --nproc "$MG_NPROC" \
    --warmup 4 --agree-tol "$MG_TOL" --json "$R/multigpu.json" \
    --title "Issue 8: $MG_MODEL, precision=$MG_PRECISION, seq $MG_SEQ, $MG_TOKENS tokens/step, lr $MG_LR after \
$MG_WARMUP warm-up steps, 1 vs $MG_NPROC GPUs" > "$R/multigpu.md" 2>&1
}

# ---- issue 5: long-context variants -------------------------------------------------------------------
LC_DONE=()   # "label precision ac" of every variant started (the summary reads their run dirs and logs)
lc_stages() {  # LENGTH... -> the Hydra stage list, LC_STAGE_STEPS steps each, RoPE base 1e5 then 5e5 (last)
  local n=$# i=0 out="" len theta
  for len in "$@"; do
    theta=""
    [ "$i" -gt 0 ] && theta=",rope_theta:$([ "$i" -eq $((n - 1)) ] && echo 500000 || echo 100000)"
    out+="${out:+,}{start:$((i * LC_STAGE_STEPS)),seq_len:$len$theta}"
    i=$((i + 1))
  done
  echo "[$out]"
}
lc_variant() {  # GPU SPEC BOX: one run of PRECISION:AC[:LONGEST]
  local gpu=$1 spec=$2 secs=$3 prec ac longest
  IFS=: read -r prec ac longest <<< "$spec"
  read -ra lens <<< "$LC_STAGES"
  [ -n "$longest" ] && [ "$longest" -gt "${lens[-1]}" ] && lens+=("$longest")
  local label="$prec-$ac${longest:+-$longest}" top=${lens[-1]} first=${lens[0]}
  local tokens=${LC_TOKENS:-$((top > LC_MB0 * first ? top : LC_MB0 * first))}
  echo "--- longctx $label on GPU $gpu: ${lens[*]}, $LC_STAGE_STEPS steps each, $tokens tokens/step, box $secs s"
  rm -rf "$W/lc_$label"
  CUDA_VISIBLE_DEVICES=$gpu OMP_NUM_THREADS=$THREADS TAIL=${TAIL:-8} box "lc_$label" "$secs" \
    python3 scripts/device/train_nockpt.py "model=$LC_MODEL" "precision=$prec" schedule=long-context \
    "parallel.activation_checkpoint=$ac" logger=none logger.log_interval=1 "${DATA[@]}" \
    "data.cache_dir=$W/tok_lc$gpu" "train.steps=$((${#lens[@]} * LC_STAGE_STEPS))" "train.seq_len=$first" \
    "train.micro_batch_size=$LC_MB0" "train.tokens_per_step=$tokens" "train.lr=$LC_LR" schedule.warmup_steps=1 \
    train.eval_batches=0 train.eval_interval=0 train.spike_sigma=0 schedule.context.unit=step \
    "schedule.context.stages=$(lc_stages "${lens[@]}")" "parallel.device=$DEVICE" "run_dir=$W/lc_$label" \
    resume=never checkpoint.interval=0 checkpoint.export_safetensors=false "${LC_EXTRA_ARGS[@]}"
  cp "$W/lc_$label/metrics.jsonl" "$R/metrics_lc_$label.jsonl" 2>/dev/null
  echo "$label $prec $ac" >> "$R/lc_runs.txt"
  pack
}
lc_queue() {  # GPU END SPEC...: variants one after another while at least LC_MIN s are left before END
  local gpu=$1 end=$2 spec secs; shift 2
  for spec in "$@"; do
    secs=$(min "$LC_BOX" $((end - $(now))))
    if [ "$secs" -lt "$LC_MIN" ]; then
      echo "--- longctx: $((end - $(now))) s left on GPU $gpu (< LC_MIN $LC_MIN): not run: $*"
      return
    fi
    lc_variant "$gpu" "$spec" "$secs"
    shift
  done
}
lc_summary() {
  [ -f "$R/lc_runs.txt" ] || return
  local args=() label prec ac
  while read -r label prec ac; do
    args+=(--run "$label" "$prec" "$ac" "$W/lc_$label" "$R/lc_$label.log")
  done < "$R/lc_runs.txt"
  python3 scripts/device/summarize_longctx.py --model "$LC_MODEL" ${GPU_GIB:+--gpu-gb "$GPU_GIB"} \
    --json "$R/longctx.json" "${args[@]}" \
    --title "Issue 5: $LC_MODEL long context, stages ${LC_STAGES// / → } ($LC_STAGE_STEPS steps each), peak memory \
per stage" > "$R/longctx.md" 2>&1
}

# ---- the plan -----------------------------------------------------------------------------------------
read -ra VARIANTS <<< "$LC_VARIANTS"
END=$((WALL - 20))   # background work ends by then: 20 s for the summaries and the tar
echo "mode $MODE, $NGPU GPU(s), setup done at $(now) s, script bounded by $WALL s"
rm -f "$R/lc_runs.txt"
case "$MODE:$((NGPU >= 2 ? 2 : NGPU))" in
  all:2)
    MG_BOX=$(min "$MG_T2" "$(left "$REC_NEED")")
    if [ "$MG_BOX" -ge 30 ]; then mg_multi "$MG_BOX"; pack
    else echo "NOTE: $MG_BOX s for the 2-GPU run after keeping $REC_NEED s for the recipes: issue 8 skipped"; fi
    recipes 1 "$(left 45)" &
    REC_PID=$!
    { [ "$MG_BOX" -ge 30 ] && { mg_one 0 "$(min "$MG_T1" "$(left 80)")"; mg_summary; pack; }
      lc_queue 0 "$END" "${VARIANTS[@]}"; } > "$R/gpu0_console.txt" 2>&1
    cat "$R/gpu0_console.txt"
    wait "$REC_PID" ;;
  all:1)
    echo "NOTE: 1 GPU: issue 8 (1 vs 2 GPUs) is skipped: it needs 2 GPUs. Recipes first (the whole GPU), then"
    echo "      long-context variants in the time left; run 'close_out.sh longctx' next for the rest."
    recipes 0 "$(left 45)"; pack
    lc_queue 0 "$END" "${VARIANTS[@]}" ;;
  recipes:[12]) recipes "${REC_GPU:-0}" "$(left 45)" ;;
  longctx:2)
    Q0=() Q1=()
    for i in "${!VARIANTS[@]}"; do
      if [ $((i % 2)) -eq 0 ]; then Q0+=("${VARIANTS[$i]}"); else Q1+=("${VARIANTS[$i]}"); fi
    done
    lc_queue 1 "$END" "${Q1[@]}" > "$R/gpu1_console.txt" 2>&1 &
    Q1_PID=$!
    lc_queue 0 "$END" "${Q0[@]}"
    wait "$Q1_PID"; cat "$R/gpu1_console.txt" ;;
  longctx:1) lc_queue 0 "$END" "${VARIANTS[@]}" ;;
  multigpu:2)
    mg_multi "$(min "$MG_T2" "$(left 60)")"; pack
    mg_one 0 "$(min "$MG_T1" "$(left 20)")"; mg_summary ;;
  multigpu:*) echo "NOTE: $NGPU GPU(s): issue 8 compares 1 and $MG_NPROC GPUs and needs $MG_NPROC: skipped" ;;
  *) echo "usage: close_out.sh [all|recipes|longctx|multigpu] (and at least one GPU, or NGPU=1 DEVICE=cpu)"
     exit 2 ;;
esac
lc_summary

echo; echo "=== summaries (at $(now) s)"
for f in "$R/recipes_nvfp4/recipes.md" "$R/multigpu.md" "$R/longctx.md"; do
  [ -f "$f" ] && { echo; cat "$f"; }
done
cat "$R"/recipes_nvfp4/recipes.md "$R/multigpu.md" "$R/longctx.md" > "$R/summary.md" 2>/dev/null
cp "$R/summary.md" "$OUT/summary.md" 2>/dev/null
echo "total wall $(now) s" | tee -a "$R/env.txt"
pack
ls -la "$OUT"
