"""Timing probe: what each part of the fp8 forward's off-diagonal tile costs (CUDA, sm_90).

    python scripts/fwd_ablation_probe.py                       # S = 8k and 16k, D = 128, every ablation and cuDNN
    python scripts/fwd_ablation_probe.py --seqs 8192 --ablate 0 1 5 --rounds 5

Why: the Gluon forward's chained loop (three programs of 64 rows per SM) spends ~1,280 SM cycles a 64 x 128 tile
at S = 8k against ~512 for its two FP8 products and ~533 issue cycles; moving exponentials to the FMA pipes made
it slower (9492c73). Each ablation leaves one part of every off-diagonal tile's work out of the kernel
(`attention_fwd_gluon.ABLATE`; the numbers are wrong, the rest of the work is the same) and the time it saves
is what that part costs on the kernel's critical path: 1 the exponentials (64 MUFU a thread), 2 the row max
(64 FMNMX and its shuffles), 3 the row sum (64 FADD and its shuffles), 4 the accumulator's rescale (64 FMUL),
5 the P·V product with P's fp8 conversion and layout change, 6 the QKᵀ product (its scores taken from the
accumulator instead: +64 FMUL), 7 both products. Timing: single forward calls (no_grad) alternating between
the variants and cuDNN, each after an L2 flush (`bench_attention.alternating_readings`), median call per round,
median round. Never imported by the package.
"""
from __future__ import annotations

import argparse
import statistics

import torch
from bench_attention import alternating_readings, cuda_stamp, one_call, peer_fn, shape_for
from flamia_kernels import attention_fwd_gluon as G
from flamia_kernels import flamia_attention

PARTS = {0: "none (the default)", 1: "exponentials", 2: "row max", 3: "row sum", 4: "acc rescale",
         5: "P·V + P's conversion", 6: "QKᵀ", 7: "both products"}


def under(ablate: int, fn):
    """fn run with `attention_fwd_gluon.ABLATE` set (the launcher reads it at call time), restored after."""
    def run():
        saved, G.ABLATE = G.ABLATE, ablate
        try:
            return fn()
        finally:
            G.ABLATE = saved
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", type=int, nargs="+", default=[8192, 16384])
    ap.add_argument("--ablate", type=int, nargs="+", default=list(PARTS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=16)
    args = ap.parse_args()
    bad = [a for a in args.ablate if a not in PARTS]
    if bad:
        raise SystemExit(f"--ablate {bad}: allowed {sorted(PARTS)}")
    cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    for seq in args.seqs:
        b, h, s, d = shape_for(seq, 128)
        gen = torch.Generator(device="cuda").manual_seed(seq)
        q, k, v = (torch.randn(b, h, s, d, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(3))
        entries = [(f"a{a}", under(a, lambda q=q, k=k, v=v: flamia_attention(q, k, v, "fp8")), None)
                   for a in args.ablate]
        entries.append(("cudnn", peer_fn("cudnn", q, k, v), None))
        rounds: dict = {}
        for rnd in range(args.rounds):
            calls = alternating_readings(entries, ("fwd",), args.calls,
                                         lambda fn, launch, mode: one_call(fn, None, mode), cuda_stamp, cache.zero_)
            for (name, _), ms in calls.items():
                rounds.setdefault(name, []).append(statistics.median(ms))
            print(f"S={seq} round {rnd + 1}: " + ", ".join(f"{n} {r[-1]:.3f}" for n, r in rounds.items()), flush=True)
        base = statistics.median(rounds["a0"]) if "a0" in rounds else float("nan")
        for name, ms in rounds.items():
            med = statistics.median(ms)
            part = PARTS[int(name[1:])] if name != "cudnn" else "cuDNN SDPA"
            print(f"S={seq} fwd {name:6s} without {part:24s} {med:.3f} ms (rounds "
                  f"{', '.join(f'{x:.3f}' for x in ms)}), saves {base - med:+.3f} ms ({(base - med) / base:+.1%})",
                  flush=True)


if __name__ == "__main__":
    main()
