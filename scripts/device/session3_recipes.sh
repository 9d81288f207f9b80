#!/usr/bin/env bash
# One device call (1× H200), issue 4: the nvfp4 linear GPU check (its message was cut off last call), the
# atomic-dQ backward against the dQ kernel (if it fails, this call's copy of the tree falls back to the dQ
# kernel, said in the output), then close_out.sh recipes: bf16 + nvfp4, 300 steps, one process, one GPU.
#   FLAMIA_COMMIT=<sha> bash scripts/device/session3_recipes.sh
set -uo pipefail
source scripts/device/setup.sh
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider"
timeout 40 $T --tb=long tests/test_linear.py -k "test_gpu_paths_match_cpu_emulation and nvfp4" \
  > "$OUT/linear_gpu.log" 2>&1
echo "linear nvfp4 exit $?"; tail -n 3 "$OUT/linear_gpu.log"
timeout 70 $T --tb=short tests/test_attention_gpu.py -k atomic > "$OUT/atomic_tests.log" 2>&1
S=$?
echo "atomic tests exit $S"; tail -n 6 "$OUT/atomic_tests.log"
if [ "$S" -ne 0 ]; then
  echo "NOTE: atomic-dQ backward failed on the GPU: this call's copy uses the dQ kernel"
  sed -i 's/dq = "atomic" if atomic_ok else "kernel"/dq = "kernel"/' kernels/attention_bwd.py
  grep -n 'dq = "kernel"$' kernels/attention_bwd.py
fi
WALL=${WALL:-470} bash scripts/device/close_out.sh recipes
