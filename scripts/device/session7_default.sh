#!/usr/bin/env bash
# Session 7's fourth device call (1× H200, ~420 s): the Gluon forward's chained variant as the fp8 fast
# path's default. The forward GPU tier against it (reference, accuracy vs exact, the Triton launch
# options against the Triton default, prefix tests with both Gluon variants, doc masking on the Triton
# path), the speed table with every peer, the Triton forward in the same run (--launch gluon off), and
# fwd+bwd at 16k timed default / Triton / default / Triton (two calls read fwd+bwd 2 ms slower at 16k
# with the Gluon forward; is it the order of the rows?).
#   bash scripts/device/session7_default.sh
set -uo pipefail
source scripts/device/setup.sh
find "$R" -mindepth 1 -delete
export FLAMIA_COMMIT=${FLAMIA_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}
T="python3 -m pytest -q -m gpu -s -p no:cacheprovider --tb=short"
TAIL=30 phase tests 200 $T tests/test_attention_gpu.py tests/test_causal_safety.py tests/test_attention_docmask.py \
  -k "gluon or (triton_matches_reference and 128) or accuracy_vs_exact or shared_operands or forward_launch_variants or fused_q or block_pointer or (test_prefix_gpu and fp8) or with_doc_ids"
echo '{"fwd": {"gluon": false}}' > "$R/triton.json"
TAIL=40 phase bench 150 python3 scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 \
  --peers cudnn,flash,flex --launch "$R/triton.json" --out "$R/bench"
tar -czf "$OUT/kernels.tar.gz" -C /tmp results
TAIL=20 phase ab16k 90 python3 - <<'PY'
import sys
sys.path.insert(0, "scripts")
import torch
from triton.testing import do_bench
from flamia_kernels import flamia_attention
from launch_configs import launch_overrides
torch.manual_seed(0)
q, k, v, do = (torch.randn(2, 16, 16384, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
for t in (q, k, v):
    t.requires_grad_(True)
def step():
    flamia_attention(q, k, v, "fp8").backward(do)
rows = []
for label, launch in [("gluon", None), ("triton", {"fwd": {"gluon": False}})] * 2:
    with launch_overrides(launch):
        ms = do_bench(step, warmup=25, rep=100, return_mode="median")
    rows.append((label, ms))
    print(f"fwd+bwd S=16384 B×H=2×16 {label}: {ms:.3f} ms", flush=True)
PY
TAIL=20 phase profile 60 python3 scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn \
  --modes fwd --profile --out "$R/profile"
tar -czf "$OUT/results.tar.gz" -C /tmp results
