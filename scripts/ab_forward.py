"""A/B of the fp8 forward's launch variants on CUDA, interleaved with cuDNN in one process.

    python scripts/ab_forward.py                                   # S = 8k and 16k, D = 128
    python scripts/ab_forward.py --seqs 8192 --variants default qpass pipe2 --rounds 3

Why: readings of one forward vary by a few percent between calls and even between slots of one call
(docs/benchmarks.md), while the variants this compares differ by about that much. So every variant and
cuDNN's SDPA are timed in turn, round after round (A B C A B C ...), and each gets the median of its
rounds: a drift of the machine touches all of them alike. Two modes per variant: `fwd` under no_grad
(what scripts/bench_attention.py's speed table times for every backend) and `train-fwd`, the forward
of a training step (inputs that require grad: the backward's saved copies are written). Variants are
launch options on top of the default forward launch (scripts/launch_configs.py's flags, e.g.
`qpass` = Q through the pre-pass, `pipe2`); `default` adds none. Never imported by the package.
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch
from bench_attention import bench, peer_fn, shape_for
from flamia_kernels import flamia_attention
from launch_configs import _FLAGS, launch_overrides


def variant_launch(name: str) -> dict:
    """"default" -> {}, "pipe2+qpass" -> {"fwd": {"pipe": 2, "fuse_q": False}}."""
    if name == "default":
        return {}
    fwd = {}
    for flag in name.split("+"):
        if flag not in _FLAGS:
            raise SystemExit(f"variant {name!r}: unknown flag {flag!r}; allowed {', '.join(_FLAGS)} or default")
        key, value = _FLAGS[flag]
        fwd[key] = value
    return {"fwd": fwd}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", type=int, nargs="+", default=[8192, 16384])
    ap.add_argument("--variants", nargs="+", default=["default", "qpass"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    rows = []
    for seq in args.seqs:
        b, h, s, d = shape_for(seq, 128)
        gen = torch.Generator(device="cuda").manual_seed(seq)
        q, k, v = (torch.randn(b, h, s, d, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(3))
        qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
        cudnn = peer_fn("cudnn", q, k, v)
        plain = lambda q=q, k=k, v=v: flamia_attention(q, k, v, "fp8")  # noqa: E731
        train = lambda q=qg, k=kg, v=vg: flamia_attention(q, k, v, "fp8")  # noqa: E731
        times: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            with torch.no_grad():
                times.setdefault("cudnn fwd", []).append(bench(cudnn))
            for name in args.variants:
                with launch_overrides(variant_launch(name)):
                    with torch.no_grad():
                        times.setdefault(f"{name} fwd", []).append(bench(plain))
                    times.setdefault(f"{name} train-fwd", []).append(bench(train))
        ref = statistics.median(times["cudnn fwd"])
        for name, ms in times.items():
            med = statistics.median(ms)
            row = dict(S=s, B=b, H=h, D=d, name=name, ms=med, rounds=ms, cudnn_over=ref / med)
            rows.append(row)
            print(f"S={s:6d} {name:24s} {med:7.3f} ms  cuDNN fwd / this {ref / med:5.3f}  rounds "
                  + " ".join(f"{x:.3f}" for x in ms), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
