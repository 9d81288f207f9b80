"""Accuracy of the fp8 backward's gradients against exact attention and against `reference`, at growing S (GPU).

    python scripts/dv_accuracy_probe.py --seqs 2048 8192 16384

Why: the fp8 fast path's dV is one FP8 product chained through every query sub-tile into one accumulator
(`AttentionSpec.fp8_dv`), and Hopper adds FP8 products to an accumulator at reduced precision, so its error can grow
with the number of sub-tiles a key row sees (with S), where the Triton kernel's fresh product per sub-tile does not.
This prints, per S, each gradient's relative L2 error and cosine against fp32 attention (autograd through SDPA),
for the default launch (the Gluon kernels) and the Triton kernels, and their distance to `reference.attention`
(the same quantized math in PyTorch, fp32 sums; S <= 8192). Run under another commit's kernels (PYTHONPATH) to
compare with it. Never imported by the package.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as TF
from flamia_kernels import flamia_attention, reference
from launch_configs import launch_overrides

TRITON = {"bwd": {"gluon": False, "gluon_dq": 0}}


def grads(fn, q, k, v, do):
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    fn(q, k, v).backward(do)
    return {"dQ": q.grad.float(), "dK": k.grad.float(), "dV": v.grad.float()}


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def cos(a, b):
    return TF.cosine_similarity(a.flatten(), b.flatten(), dim=0).item()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", type=int, nargs="+", default=[2048, 8192, 16384])
    ap.add_argument("--heads", type=int, default=2)
    args = ap.parse_args(argv)
    for seq in args.seqs:
        gen = torch.Generator(device="cuda").manual_seed(seq)
        q, k, v, do = (torch.randn(1, args.heads, seq, 128, generator=gen, device="cuda").to(torch.bfloat16)
                       for _ in range(4))
        exact = grads(lambda q, k, v: TF.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                                      is_causal=True), q, k, v, do.float())
        runs = {"default": grads(lambda q, k, v: flamia_attention(q, k, v, "fp8"), q, k, v, do)}
        with launch_overrides(TRITON):
            runs["triton"] = grads(lambda q, k, v: flamia_attention(q, k, v, "fp8"), q, k, v, do)
        ref = grads(lambda q, k, v: reference.attention(q, k, v, "fp8"), q, k, v, do) if seq <= 8192 else None
        for name, g in runs.items():
            line = " ".join(f"{n} rel {rel(g[n], exact[n]):.5f} cos {cos(g[n], exact[n]):.6f}" for n in g)
            if ref is not None:
                line += " | vs reference " + " ".join(f"{n} {rel(g[n], ref[n]):.2e}" for n in g)
            print(f"S={seq} {name:8s} vs exact: {line}", flush=True)
        del runs, ref, exact
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
