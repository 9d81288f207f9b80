#!/usr/bin/env bash
# Session 14, first call: the warp-specialized forward (attention_fwd_ws). A smoke run first (a deadlocked mbarrier
# would hang: each phase is time-boxed), its GPU tests (bit-identity with the chained Gluon kernel, pre-pass and fused
# Q, fwd + bwd), then the forward against cuDNN and the default launch, interleaved (scripts/ab_forward.py).
#   bash scripts/device/session14_ws.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=8 phase smoke 120 python3 - <<'PY'
import torch
from flamia_kernels import AttentionSpec, attention_fwd_gluon, attention_fwd_ws
from flamia_kernels import quantize as QZ
from flamia_kernels.attention_operands import prepare_forward
spec = AttentionSpec.parse("fp8")
q, k, v = (torch.randn(1, 2, 1024, 128, device="cuda").to(torch.bfloat16) for _ in range(3))
ops = prepare_forward(q, k, v, spec, True, QZ, 128, v_transposed=True)
base = attention_fwd_gluon.forward(ops.q, ops.k, ops.v, True, 128 ** -0.5, True, pipe=3)
for pp in (False, True):
    got = attention_fwd_ws.forward(ops.q, ops.k, ops.v, True, 128 ** -0.5, True, pingpong=pp)
    torch.cuda.synchronize()
    print("pingpong", pp, [torch.equal(a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
                                       b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b)
                           for a, b in zip(got, base)], (got[0].float() - base[0].float()).abs().max().item())
PY
if grep -q "^pingpong True" "$R/smoke.log"; then
  TAIL=14 phase tests_ws 300 $GPU_TESTS tests/test_attention_gpu.py -k "ws_forward"
  TAIL=12 phase ab 420 python3 scripts/ab_forward.py --seqs 8192 16384 --variants default ws ws+nopp ws+ws4 \
    --rounds 5 --out "$R/ab.json"
fi
tar -czf "$OUT/results.tar.gz" -C /tmp results
