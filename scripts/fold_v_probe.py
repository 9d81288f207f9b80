"""Probe: V's off-diagonal block scale folded into P so the forward's accumulator is rescaled only where a row max
grows (CUDA, sm_90).

    python scripts/fold_v_probe.py                      # S = 8k and 16k, D = 128, every variant and cuDNN
    python scripts/fold_v_probe.py --seqs 8192 --fold 0 2 --rounds 5

Why: leaving the accumulator's rescale out of the Gluon forward's off-diagonal tiles saved 6.6% / 9.8% of the forward
at S = 8k / 16k (d15f939's ablation), but it carries V's block scale from tile to tile (cv / s_vb) as well as the
row max's growth. `attention_fwd_gluon.FOLD_V` folds s_vb / R into P through the exponent (R the program's largest
off-diagonal V block scale: keys before its rows, causally safe), so the rescale is needed only where a row max
grows: 1 rescaled every tile anyway (the fold's own cost), 2 only on tiles where some row's max grew (a reduction
over the program's rows decides), 3 never (wrong where a max grows: the bound). Each variant's O is compared with
the default's (rel-L2, share of differing elements) and with `reference.attention` at S = 2048. Timing: single
forward calls (no_grad) alternating between the variants and cuDNN, each after an L2 flush, median call per round,
median round. Never imported by the package.
"""
from __future__ import annotations

import argparse
import statistics

import torch
from bench_attention import alternating_readings, cuda_stamp, one_call, peer_fn, shape_for
from flamia_kernels import attention_fwd_gluon as G
from flamia_kernels import flamia_attention

PARTS = {0: "default", 1: "fold, rescale every tile", 2: "fold, rescale where a max grew",
         3: "fold, never rescale (bound)"}


def under(fold: int, fn):
    """fn run with `attention_fwd_gluon.FOLD_V` set (the launcher reads it at call time), restored after."""
    def run():
        saved, G.FOLD_V = G.FOLD_V, fold
        try:
            return fn()
        finally:
            G.FOLD_V = saved
    return run


def accuracy(folds, seq: int = 2048) -> None:
    from flamia_kernels import reference

    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (torch.randn(2, 8, seq, 128, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(3))
    v = v * torch.logspace(-2, 1, seq, device="cuda")[:, None].bfloat16()  # V's block scales differ tile to tile
    with torch.no_grad():
        ref = reference.attention(q, k, v, "fp8").float()
        base = under(0, lambda: flamia_attention(q, k, v, "fp8"))().float()
        for fold in folds:
            o = under(fold, lambda: flamia_attention(q, k, v, "fp8"))().float()
            print(f"accuracy S={seq} f{fold} vs default: rel-L2 {((o - base).norm() / base.norm()).item():.3e}, "
                  f"differing {(o != base).float().mean().item():.4f}; vs reference rel-L2 "
                  f"{((o - ref).norm() / ref.norm()).item():.3e}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", type=int, nargs="+", default=[8192, 16384])
    ap.add_argument("--fold", type=int, nargs="+", default=list(PARTS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=16)
    args = ap.parse_args()
    bad = [a for a in args.fold if a not in PARTS]
    if bad:
        raise SystemExit(f"--fold {bad}: allowed {sorted(PARTS)}")
    accuracy(args.fold)
    cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    for seq in args.seqs:
        b, h, s, d = shape_for(seq, 128)
        gen = torch.Generator(device="cuda").manual_seed(seq)
        q, k, v = (torch.randn(b, h, s, d, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(3))
        entries = [(f"f{a}", under(a, lambda q=q, k=k, v=v: flamia_attention(q, k, v, "fp8")), None)
                   for a in args.fold]
        entries.append(("cudnn", peer_fn("cudnn", q, k, v), None))
        rounds: dict = {}
        for rnd in range(args.rounds):
            calls = alternating_readings(entries, ("fwd",), args.calls,
                                         lambda fn, launch, mode: one_call(fn, None, mode), cuda_stamp, cache.zero_)
            for (name, _), ms in calls.items():
                rounds.setdefault(name, []).append(statistics.median(ms))
            print(f"S={seq} round {rnd + 1}: " + ", ".join(f"{n} {r[-1]:.3f}" for n, r in rounds.items()), flush=True)
        base = statistics.median(rounds["f0"]) if "f0" in rounds else float("nan")
        for name, ms in rounds.items():
            med = statistics.median(ms)
            part = PARTS[int(name[1:])] if name != "cudnn" else "cuDNN SDPA"
            print(f"S={seq} fwd {name:6s} {part:32s} {med:.3f} ms (rounds "
                  f"{', '.join(f'{x:.3f}' for x in ms)}), saves {base - med:+.3f} ms ({(base - med) / base:+.1%})",
                  flush=True)


if __name__ == "__main__":
    main()
