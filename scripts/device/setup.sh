# Source on the GPU machine (no network): install the carried wheels and expose the repo's packages.
#   source scripts/device/setup.sh
# The wheels (hydra-core, omegaconf, antlr4, datasets, dill, multiprocess) travel in .whl/ (ignored);
# the image already has torch, triton, sentencepiece, safetensors, pyarrow.
# (kernel-only calls carry no wheels: the attention tests and benchmarks need none of them)
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
mkdir -p /tmp/pkgs && ln -sfn "$PWD/kernels" /tmp/pkgs/flamia_kernels
export PYTHONPATH=/tmp/site:/tmp/pkgs:$PWD${PYTHONPATH:+:$PYTHONPATH}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# Results of a device call go under R (tarred into $OUT at the end: the device returns at most 8 files).
OUT=${OUT:-/tmp/out}; R=/tmp/results; mkdir -p "$OUT" "$R"
# phase NAME SECONDS CMD...: run CMD time-boxed, log to $R/NAME.log, print its exit code and tail.
phase() {
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" "$@" > "$R/$name.log" 2>&1
  echo "=== $name exit $? ($((SECONDS - t0)) s)"; tail -n "${TAIL:-12}" "$R/$name.log"
}
# A device call's results start empty and carry the commit they are of (.gpu/COMMIT, written before the call).
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
# P=$(kernels_at NAME DIR): a PYTHONPATH whose flamia_kernels is DIR (an absolute path), through /tmp/NAMEpkgs.
kernels_at() {
  mkdir -p "/tmp/$1pkgs" && ln -sfn "$2" "/tmp/$1pkgs/flamia_kernels"
  echo "/tmp/site:/tmp/$1pkgs:$PWD"
}
# BASE=$(base_kernels): a PYTHONPATH whose flamia_kernels is .gpu/base/kernels, another commit's kernels for an
# A/B in one call (git archive REV kernels | tar -x -C .gpu/base; .gpu travels in `carry`).
base_kernels() { kernels_at base "$PWD/.gpu/base/kernels"; }
# gaps_vs_base ROUNDS PATTERN: scripts/launch_gaps.py at S = 8k, .gpu/base's kernels and this tree's in turn for
# ROUNDS rounds (logs gaps_base_N, gaps_new_N), then each log's lines matching PATTERN (grep) — an A/B of kernel
# times in one call, where a drift of the machine touches both sides alike.
gaps_vs_base() {
  local rounds=$1 pattern=$2 base round f
  base=$(base_kernels)
  for round in $(seq 1 "$rounds"); do
    TAIL=1 phase "gaps_base_$round" 60 env PYTHONPATH="$base" python3 scripts/launch_gaps.py --seq 8192
    TAIL=1 phase "gaps_new_$round" 60 python3 scripts/launch_gaps.py --seq 8192
  done
  for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep "$pattern" "$f"; done
}
# GPU_TESTS: pytest on the GPU tier (-m gpu), printing the tests' figures; GPU_TESTS_ARGS without the
# interpreter, for a wrapper (scripts/device/with_constants.py ... -- $GPU_TESTS_ARGS tests/...)
GPU_TESTS_ARGS="-m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
GPU_TESTS="python3 $GPU_TESTS_ARGS"
# test_verdict [NAME]: the outcome lines of a pytest phase's log ($R/NAME.log, tests by default)
test_verdict() { grep -E "^(FAILED|ERROR)|passed|failed" "$R/${1:-tests}.log" | tail -4; }
# save: the results so far into $OUT (a call that runs out of time keeps what its phases saved)
save() { tar -czf "$OUT/results.tar.gz" -C /tmp results; }
# which card ran the call, first in its output
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader 2>/dev/null || true
# gaps_launches ROUNDS PATTERN NAME[=LAUNCH.json] ...: scripts/launch_gaps.py at S = 8k under each launch file in turn
# (NAME alone: the defaults) for ROUNDS rounds (logs gaps_NAME_N), then each log's lines matching PATTERN (grep -iE)
gaps_launches() {
  local rounds=$1 pattern=$2 round spec f; shift 2
  for round in $(seq 1 "$rounds"); do
    for spec in "$@"; do
      local launch=()
      [[ $spec == *=* ]] && launch=(--launch "${spec#*=}")
      TAIL=0 phase "gaps_${spec%%=*}_$round" 60 python3 scripts/launch_gaps.py --seq 8192 --calls 3 "${launch[@]}"
    done
  done
  for f in "$R"/gaps_*.log; do echo "== $(basename "$f")"; grep -iE "$pattern" "$f" | head -8; done
}
