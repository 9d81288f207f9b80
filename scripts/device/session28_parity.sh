#!/usr/bin/env bash
# Session 28, call 3: does the fp8 preset's FP8 dQ product (dsk=fp8) train like bf16 dS? Two runs of the fp8 recipe
# side by side on one GPU, the same seed, data order and held-out batches: gpt-125m with 6 heads of 128 (so that the
# fast D = 128 backward runs: the fp8 dS buffer) at 1024 × 4 tokens a step, one with every layer's attention at
# dsk=bf16 (the former fp8). Sharing the GPU slows both; it changes no loss. Held-out loss every 250 steps.
#   bash scripts/device/session28_parity.sh    (knobs: STEPS=1000 BUDGET=400 SEEDS="1234", the config's seed; several
#   seeds run all their pairs at once — session 31: STEPS=800 BUDGET=430 SEEDS="1234 4321", four runs on one GPU)
# .gpu/corpus32k holds ~3.4M training tokens: 1000 steps of 4096 are ~1.2 epochs; past ~830 steps the held-out loss
# measures overfitting as much as numerics (session 30: its minimum at step 750 of a 2000-step schedule)
set -uo pipefail
source scripts/device/setup.sh
STEPS=${STEPS:-1000} BUDGET=${BUDGET:-400} SEEDS=${SEEDS:-${SEED:-1234}} EVAL_EVERY=${EVAL_EVERY:-250}
C=.gpu/corpus32k
mkdir -p "$R/parity"
run() {  # run NAME SEED EXTRA...
  local name=$1 seed=$2; shift 2
  timeout -k 15 $((BUDGET + 120)) python3 scripts/bench_parity.py --preset fp8 --model gpt-125m --device cuda \
    --run-dir "runs/parity28/${name}_$seed" --out "$R/parity/${name}_$seed.json" --corpus "$C" --steps "$STEPS" \
    --seq-len 1024 --micro-batch 4 --budget "$BUDGET" --eval-every "$EVAL_EVERY" -- "data.cache_dir=/tmp/tok_${name}_$seed" \
    model.n_heads=6 model.n_kv_heads=6 "train.seed=$seed" "$@" > "$R/parity_${name}_$seed.log" 2>&1 &
}
# both spelled out: `fp8` is dsk=bf16 since e085192 (session 30's call 7 ran this pair as two identical dsk=bf16 runs)
for seed in $SEEDS; do
  run dsk_fp8 "$seed" "+precision.layers.L0_11.attention.dsk=fp8"
  run dsk_bf16 "$seed" "+precision.layers.L0_11.attention.dsk=bf16"
done
wait
for f in "$R"/parity_*.log; do echo "== $f"; grep -v '^step \|^ *[0-9]\+ \|tokenizing' "$f" | tail -8; done
python3 - "$R/parity" <<'PY'
import json, sys, pathlib
rows = {p.stem: json.loads(p.read_text())["rows"][0] for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json"))}
for name, r in rows.items():
    print(name, "steps", r["steps_done"], "final", round(r["final_loss"], 4), "heldout", r["heldout_loss"],
          "@", r["heldout_step"], "tok/s", round(r["tokens_per_s"]), "skipped", r["skipped_steps"])
steps = sorted({s for r in rows.values() for s, _ in r["evals"]})
print("step " + " ".join(rows))
for s in steps:
    print(s, *(dict(map(tuple, r["evals"])).get(s, "-") for r in rows.values()))
PY
tar -czf "$OUT/results.tar.gz" -C /tmp results
