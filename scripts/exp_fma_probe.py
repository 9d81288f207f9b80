"""Timing probe: the fp8 forward with some of its off-diagonal exponentials on the FMA pipes (CUDA, sm_90).

    python scripts/exp_fma_probe.py                          # S = 8k and 16k, D = 128, every variant and cuDNN
    python scripts/exp_fma_probe.py --seqs 8192 --variants base split3 --rounds 5

Why: the Gluon forward's loop issues 533 sm_90 instructions a 64 x 128 tile, 67 of them MUFU (the XU pipe, a
quarter of the issue rate), and the tensor cores need ~512 cycles of an SM for a tile's two FP8 products: the
exponentials keep the XU pipe as busy as the tensor cores, and Nsight Compute put both near 40% (docs/kernels.md,
open item 1). `attention_fwd_gluon._exp2_fma` computes 2^x on the FMA pipes (a polynomial and an exponent add,
~8 instructions instead of one MUFU). Variants (module constants of attention_fwd_gluon, the forward kernel's
constexprs): base (MUFU only, the default), splitD (every tile's odd columns by a degree-D polynomial), everyN_D
(every N-th tile wholly by the polynomial). Each variant's O is compared with the base's (rel-L2, the share of
O's elements that differ) and with `reference.attention` at S = 2048 (same quantized math, torch.exp2).
Timing: single forward calls (no_grad) alternating between the variants and cuDNN, each after an L2 flush
(`bench_attention.alternating_readings`), median call per round, median round. Never imported by the package.
"""
from __future__ import annotations

import argparse
import re
import statistics

import torch
from bench_attention import alternating_readings, cuda_stamp, one_call, peer_fn, shape_for
from flamia_kernels import attention_fwd_gluon as G
from flamia_kernels import flamia_attention, reference

VARIANTS = ("base", "split3", "split5", "every4_3", "every2_3", "every3_3")


def constants(variant: str) -> dict:
    """attention_fwd_gluon's probe constants of a variant name."""
    if variant == "base":
        return dict(EXP_FMA_EVERY=0, EXP_FMA_DEGREE=5, EXP_FMA_SPLIT=False)
    m = re.fullmatch(r"split([35])", variant)
    if m:
        return dict(EXP_FMA_EVERY=0, EXP_FMA_DEGREE=int(m[1]), EXP_FMA_SPLIT=True)
    m = re.fullmatch(r"every(\d+)_([35])", variant)
    if m and int(m[1]) > 0:
        return dict(EXP_FMA_EVERY=int(m[1]), EXP_FMA_DEGREE=int(m[2]), EXP_FMA_SPLIT=False)
    raise SystemExit(f"variant {variant!r}: allowed base, split3, split5, everyN_3, everyN_5 (N > 0)")


def under(variant: str, fn):
    """fn run with the variant's constants set (the launcher reads them at call time), restored after."""
    def run():
        saved = {k: getattr(G, k) for k in constants(variant)}
        for k, v in constants(variant).items():
            setattr(G, k, v)
        try:
            return fn()
        finally:
            for k, v in saved.items():
                setattr(G, k, v)
    return run


def accuracy(variants, seq: int = 2048) -> None:
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (torch.randn(2, 8, seq, 128, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(3))
    with torch.no_grad():
        ref = reference.attention(q, k, v, "fp8").float()
        base = under("base", lambda: flamia_attention(q, k, v, "fp8"))().float()
        for variant in variants:
            o = under(variant, lambda: flamia_attention(q, k, v, "fp8"))().float()
            print(f"accuracy S={seq} {variant:10s} vs base: rel-L2 {((o - base).norm() / base.norm()).item():.3e}, "
                  f"differing elements {(o != base).float().mean().item():.4f}; vs reference rel-L2 "
                  f"{((o - ref).norm() / ref.norm()).item():.3e}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", type=int, nargs="+", default=[8192, 16384])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    for variant in args.variants:
        constants(variant)
    accuracy(args.variants)
    cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    for seq in args.seqs:
        b, h, s, d = shape_for(seq, 128)
        gen = torch.Generator(device="cuda").manual_seed(seq)
        q, k, v = (torch.randn(b, h, s, d, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(3))
        entries = [(name, under(name, lambda q=q, k=k, v=v: flamia_attention(q, k, v, "fp8")), None)
                   for name in args.variants]
        entries.append(("cudnn", peer_fn("cudnn", q, k, v), None))
        rounds: dict = {}
        for rnd in range(args.rounds):
            calls = alternating_readings(entries, ("fwd",), args.calls,
                                         lambda fn, launch, mode: one_call(fn, None, mode), cuda_stamp, cache.zero_)
            for (name, _), ms in calls.items():
                rounds.setdefault(name, []).append(statistics.median(ms))
            print(f"S={seq} round {rnd + 1}: " + ", ".join(f"{n} {r[-1]:.3f}" for n, r in rounds.items()), flush=True)
        base, cudnn = statistics.median(rounds["base"]), statistics.median(rounds["cudnn"])
        for name, ms in rounds.items():
            med = statistics.median(ms)
            print(f"S={seq} fwd {name:10s} {med:.3f} ms (rounds {', '.join(f'{x:.3f}' for x in ms)}), "
                  f"x base {base / med:.3f}, cuDNN / it {cudnn / med:.3f}", flush=True)


if __name__ == "__main__":
    main()
