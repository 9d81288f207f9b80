#!/usr/bin/env bash
# Session 14, persistent grid for the warp-specialized forward (one program per SM over the work items, the producer
# running ahead into the next item): a time-boxed smoke check of both grids against the chained kernel (bit for bit),
# then the forward against the default and cuDNN, interleaved.
#   bash scripts/device/session14_persist.sh   (carry .gpu)
set -uo pipefail
source scripts/device/setup.sh
TAIL=6 phase smoke 60 python3 - <<'PY'
import torch
from flamia_kernels import AttentionSpec, attention_fwd_gluon, attention_fwd_ws
from flamia_kernels import quantize as QZ
from flamia_kernels.attention_operands import prepare_forward
spec = AttentionSpec.parse("fp8")
gen = torch.Generator(device="cuda").manual_seed(5)
for b, hq, hkv, s in ((2, 8, 2, 1920), (1, 16, 16, 8192)):
    q = torch.randn(b, hq, s, 128, device="cuda", generator=gen).to(torch.bfloat16)
    k, v = (torch.randn(b, hkv, s, 128, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(2))
    ops = prepare_forward(q, k, v, spec, True, QZ, 128, v_transposed=True)
    base = attention_fwd_gluon.forward(ops.q, ops.k, ops.v, True, 128 ** -0.5, True, pipe=3)
    for persistent in (False, True):
        got = attention_fwd_ws.forward(ops.q, ops.k, ops.v, True, 128 ** -0.5, True, persistent=persistent)
        torch.cuda.synchronize()
        bits = lambda x: x.view(torch.uint8) if x.dtype == torch.float8_e4m3fn else x
        same = [torch.equal(bits(x), bits(y)) for x, y in zip(got, base)]
        print(f"S={s} persistent={persistent} bit-identical {same}", "OK" if all(same) else "DIFF")
PY
if [ "$(grep -c ' OK$' "$R/smoke.log")" = 4 ]; then
  TAIL=10 phase ab 120 python3 scripts/ab_forward.py --seqs 8192 16384 --variants default ws ws+persist --rounds 2
fi
tar -czf "$OUT/results.tar.gz" -C /tmp results
