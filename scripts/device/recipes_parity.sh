#!/usr/bin/env bash
# Issues 4 and 6 in one device call of < 480 s wall on 2× H200, every process time-boxed:
#   GPU 1: scripts/bench_recipes.py: gpt-125m, 300 steps of each of the six presets in ONE process,
#          seq 1024 × 8 rows (as final_session.sh), alone on its GPU so that tokens/s are clean;
#   GPU 0: scripts/bench_parity.py bf16 and flamia side by side: gpt-125m, 2000 steps of 1024 × 4
#          tokens, held-out loss every 250 steps. Sharing the GPU slows them; it changes no loss.
# Every process stops itself at its budget and writes what it has: bench_recipes --deadline ends the
# preset in progress; bench_parity sends the trainer SIGTERM, which checkpoints. The parity runs keep
# their checkpoints in runs/parity (git-ignored; kept only while the machine stays warm, ~30 s after a
# call), so `recipes_parity.sh parity` issued right after continues them, one GPU each.
# 1 GPU: the recipes first, then the parity runs, each on about half the time (said in the output).
#   FLAMIA_COMMIT=<sha> bash scripts/device/recipes_parity.sh [all|recipes|parity]
# Knobs (environment): WALL (470: seconds for the whole script), RECIPE_PRESETS, RECIPE_STEPS (300),
# RECIPE_MB (8), PARITY_STEPS (2000), PARITY_MB (4), PARITY_EXTRA (Hydra overrides for both parity
# runs), MODEL, SEQ, DEVICE and NGPU (for a CPU dry run: MODEL=tiny SEQ=128 DEVICE=cpu NGPU=2).
# Results: $OUT/results.tar.gz (results/recipes*/, results/parity/*.json, logs). PNGs: scripts/plot_losses.py.
set -uo pipefail
source scripts/device/setup.sh
MODE=${1:-all}
C=${CORPUS:-.gpu/corpus32k}
WALL=${WALL:-470}
MODEL=${MODEL:-gpt-125m} SEQ=${SEQ:-1024} DEVICE=${DEVICE:-cuda}
RECIPE_PRESETS=${RECIPE_PRESETS:-bf16 flamia fp8 fp8-block mxfp8 nvfp4}  # flamia early: never measured yet
RECIPE_STEPS=${RECIPE_STEPS:-300} RECIPE_MB=${RECIPE_MB:-8}
PARITY_STEPS=${PARITY_STEPS:-2000} PARITY_MB=${PARITY_MB:-4} PARITY_EXTRA=${PARITY_EXTRA:-}
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-unknown}
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
nvidia-smi --query-gpu=index,name,clocks.sm --format=csv,noheader > "$R/gpu.txt" 2>&1
mkdir -p "$R/parity"
declare -A PID=()

left() { echo $((WALL - SECONDS - ${1:-45})); }  # budget left, keeping $1 s for stopping, the tar and slack
recipes() {  # recipes NAME GPU BUDGET PRESETS...: presets in one process, in the background
  local name=$1 gpu=$2 budget=$3; shift 3
  CUDA_VISIBLE_DEVICES=$gpu timeout -k 15 $((budget + 90)) python3 scripts/bench_recipes.py --model "$MODEL" \
    --steps "$RECIPE_STEPS" --seq-len "$SEQ" --micro-batch "$RECIPE_MB" --presets "$@" --device "$DEVICE" \
    --corpus "$C" --out "$R/$name" --deadline "$budget" --no-plot --extra "data.cache_dir=/tmp/tok_$name" \
    > "$R/$name.log" 2>&1 &
  PID[$name]=$!
  echo "--- $name on GPU $gpu: $* ($RECIPE_STEPS steps, $SEQ × $RECIPE_MB, budget $budget s)"
}
parity() {  # parity PRESET GPU BUDGET: one resumable flamia-train run, in the background
  CUDA_VISIBLE_DEVICES=$2 timeout -k 15 $(($3 + 150)) python3 scripts/bench_parity.py --preset "$1" \
    --model "$MODEL" --device "$DEVICE" --run-dir "runs/parity/$1" --out "$R/parity/$1.json" --corpus "$C" \
    --steps "$PARITY_STEPS" --seq-len "$SEQ" --micro-batch "$PARITY_MB" --budget "$3" \
    -- "data.cache_dir=/tmp/tok_parity_$1" $PARITY_EXTRA >> "$R/parity_$1.log" 2>&1 &
  PID[parity_$1]=$!
  echo "--- parity $1 on GPU $2: $PARITY_STEPS steps of $SEQ × $PARITY_MB, budget $3 s"
}
finish() {  # wait for every background job; its exit code and the end of its log
  for name in "${!PID[@]}"; do
    wait "${PID[$name]}"
    echo "=== $name exit $? (at $SECONDS s)"; grep -v '^step \|^ *[0-9]\+ \|^layer \|^lm_head \|tokenizing' \
      "$R/$name.log" | tail -n "${TAIL:-12}"
  done
  PID=()
}
report() {  # the tables, from the JSON (no matplotlib here)
  for f in "$R"/recipes*/*.json; do [ -f "$f" ] && python3 scripts/plot_losses.py "$f"; done
  ls "$R"/parity/*.json > /dev/null 2>&1 && python3 scripts/plot_losses.py --kind parity "$R"/parity/*.json
}

echo "mode $MODE, $NGPU GPU(s), setup done at $SECONDS s, whole script within $WALL s"
read -r -a PRESETS <<< "$RECIPE_PRESETS"
case "$MODE:$((NGPU >= 2))" in
  all:1)
    recipes recipes 1 "$(left)" "${PRESETS[@]}"
    parity bf16 0 "$(left)"; parity flamia 0 "$(left)"
    finish ;;
  all:0)
    echo "NOTE: 1 GPU: recipes then parity, each on about half of the time: some presets or parity steps"
    echo "      may not be reached; run 'recipes_parity.sh parity' at once after this call to continue the parity runs"
    recipes recipes 0 "$(( $(left) / 2 ))" "${PRESETS[@]}"; finish
    parity bf16 0 "$(left)"; parity flamia 0 "$(left)"; finish ;;
  recipes:1)  # both GPUs, each with its own bf16 reference (plot_losses.py keeps the first)
    half=$(( (${#PRESETS[@]} + 1) / 2 ))
    recipes recipes 0 "$(left)" "${PRESETS[@]:0:half}"
    recipes recipes_b 1 "$(left)" bf16 "${PRESETS[@]:half}"
    finish ;;
  recipes:0) recipes recipes 0 "$(left)" "${PRESETS[@]}"; finish ;;
  parity:1) parity bf16 0 "$(left)"; parity flamia 1 "$(left)"; finish ;;
  parity:0) parity bf16 0 "$(left)"; parity flamia 0 "$(left)"; finish ;;
  *) echo "usage: recipes_parity.sh [all|recipes|parity]"; exit 2 ;;
esac
report
tar -czf "$OUT/results.tar.gz" -C "$(dirname "$R")" "$(basename "$R")"
echo "done at $SECONDS s: $OUT/results.tar.gz"
