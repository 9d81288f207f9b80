#!/usr/bin/env bash
# One device call (1× H200, ~440 s): torchtitan beside our stack on gpt-1b at 8k (issue 6, item 2).
#   1. torchtitan 0.2.2 (+ torchdata, tyro, docstring-parser, typeguard, tomli) from .whl-titan/ (carried):
#      does it import under the GPU's torch 2.11?
#   2. scripts/bench_torchtitan.py: torchtitan's Llama 3 at gpt-1b's shape, bf16 FSDP2, eager, 16,384 tokens
#      per step in micro-batches of one 8k row (bench_train's setup);
#   3. bench_train.py: our bf16 and bf16 + per-block torch.compile, same setup, recorded;
#   4. torchtitan with its torch.compile.
#   FLAMIA_COMMIT=<sha> bash scripts/device/session4_torchtitan.sh     (carry .whl .gpu .whl-titan)
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-titan/*.whl
TAIL=6 phase import 60 python3 -c "import torch, torchtitan, torchtitan.train; print('torch', torch.__version__, 'torchtitan', torchtitan.__version__)"
TAIL=20 phase torchtitan_eager 200 python3 scripts/bench_torchtitan.py --contexts 8k --variants eager --out "$R/torchtitan"
TAIL=12 phase bench_train 180 python3 scripts/bench_train.py --model gpt-1b --recipes bf16 "bf16-compile:bf16 parallel.compile=true" \
  --contexts 8k --warmup 3 --steps 4 --profile-steps 1 --tokens-per-step 16384 --micro-tokens 8192 --out "$R/bench_train" --record
cp docs/bench_train.json "$R/bench_train_recorded.json"
tar -czf "$OUT/results.tar.gz" -C /tmp results
TAIL=20 phase torchtitan_compile 130 python3 scripts/bench_torchtitan.py --contexts 8k --variants compile --timeout 120 \
  --out "$R/torchtitan_compile"
tar -czf "$OUT/results.tar.gz" -C /tmp results
