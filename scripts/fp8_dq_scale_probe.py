"""Does the FP8 dQ product (spec part dsk=fp8) lose accuracy to its scale? dQ's error against fp32 attention with
dS·s_k quantized to E4M3 under three scales — ρ, the bound the kernels use (`reference.dq_row_scale`), the exact
per-query amax, and a per-(query, 64-key block) amax — beside bf16 dS, on the CPU reference, for inputs that stress
the bound: N(0,1), a sharper softmax (Q and K scaled up), a heavy-tailed dO.

    python scripts/fp8_dq_scale_probe.py [--seq 1024]

Prints, per input, each dQ's rel-L2 against fp32 and how many bits ρ sits above the exact amax scale on average.
Measured (session 28, docs/kernels.md, open item 1): the three scales give the same error to four digits, though ρ
sits 5–8 bits above the amax; FP8 dS costs its 3-bit mantissa, not its scale. Never imported by the package.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import test_fp8_ds_bounds as bounds  # noqa: E402  (its inputs and the reference's dS, shared with the bound tests)
from flamia_kernels import formats as F  # noqa: E402
from flamia_kernels import reference as R  # noqa: E402

# name -> (Q and K multiplied by, a heavy-tailed dO); N(0,1) inputs otherwise
CASES = {"normal": (1.0, False), "sharp": (2.0, False), "heavy-dO": (1.0, True), "sharp3+heavy-dO": (3.0, True)}
KEY_BLOCK = 64


def errors(qk_scale: float, heavy_do: bool, seq: int, seed: int = 10) -> dict[str, float]:
    q, k, v, do = bounds._inputs(seed, hq=2, hkv=2, s=seq)
    q, k = ((x.float() * qk_scale).bfloat16() for x in (q, k))
    if heavy_do:  # 1% of dO's entries 21× as large
        hit = torch.rand(do.shape, generator=torch.Generator().manual_seed(seed)) < 0.01
        do = (do.float() * (1 + 20 * hit)).bfloat16()
    qq, kk, vv = (x.float().requires_grad_() for x in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=True).backward(do.float())
    exact = qq.grad
    ops, do8, delta, m, linv, sm = bounds._backward_inputs(q, k, v, do)
    args = (ops, bounds.SPEC, do8, delta, m, linv, True, True, sm)
    a, keep, pr = bounds._ds(ops, do8, delta, m, linv, sm, fold="k")
    a = torch.where(keep, a, 0.0)  # dS·s_k, the FP8 product's A operand before its scale
    row = R.pow2_at_least(a.abs().amax(-1) / 448.0)[..., None]
    block = R.pow2_at_least(a.unflatten(-1, (-1, KEY_BLOCK)).abs().amax(-1) / 448.0).repeat_interleave(KEY_BLOCK, -1)
    off = lambda op: None if op.off is None else op.off.per_token_scale()  # noqa: E731
    rho = R.dq_row_scale(do8, delta, linv, ops.k.scale, off(ops.k), ops.v.scale, off(ops.v), True)
    product = lambda scale: pr.split(F.quantize_fp8(a / scale, torch.tensor(1.0)).float() * scale,  # noqa: E731
                                     pr.kv(ops.k.vals), pr.off_rows(ops.k)) * sm
    rel = lambda x: ((x - exact).norm() / exact.norm()).item()  # noqa: E731
    return {"bf16 dS": rel(R.backward_math(*args, fp8_dq=False)[0]), "rho": rel(R.backward_math(*args, fp8_dq=True)[0]),
            "row amax": rel(product(row)), "key-block amax": rel(product(block)),
            "bits above": torch.log2(rho / row[..., 0]).mean().item()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated names of CASES")
    args = p.parse_args(argv)
    for name in args.cases.split(","):
        e = errors(*CASES[name], args.seq)
        print(f"{name}: dQ rel-L2 vs fp32: bf16 dS {e['bf16 dS']:.4f}, rho {e['rho']:.4f}, row amax "
              f"{e['row amax']:.4f}, key-block amax {e['key-block amax']:.4f}; rho {e['bits above']:.2f} bits above "
              f"the row amax scale")


if __name__ == "__main__":
    main()
