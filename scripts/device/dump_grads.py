"""Save one fp8 attention call's O, dQ, dK and dV (fixed seeds) to a file, or compare two such files bit for bit:
an A/B of two kernel trees in one device call (the base tree through PYTHONPATH), where a change is meant to move no
bit.

    python scripts/device/dump_grads.py save OUT.pt [--seq 2048] [--batch-heads 2x8] [--kv-heads 2]
    python scripts/device/dump_grads.py compare A.pt B.pt      # exit 1 unless every tensor is bit-identical

Never imported by the package.
"""
from __future__ import annotations

import argparse
import sys

import torch


def save(path: str, seq: int, batch_heads: str, kv_heads: int) -> None:
    from flamia_kernels import flamia_attention

    b, h = (int(x) for x in batch_heads.split("x"))
    gen = torch.Generator(device="cuda").manual_seed(1234)
    q = torch.randn(b, h, seq, 128, device="cuda", generator=gen).to(torch.bfloat16).requires_grad_(True)
    k, v = (torch.randn(b, kv_heads, seq, 128, device="cuda", generator=gen).to(torch.bfloat16).requires_grad_(True)
            for _ in range(2))
    do = torch.randn(b, h, seq, 128, device="cuda", generator=gen).to(torch.bfloat16)
    o = flamia_attention(q, k, v, "fp8")
    o.backward(do)
    torch.save({"O": o.detach().cpu(), "dQ": q.grad.cpu(), "dK": k.grad.cpu(), "dV": v.grad.cpu()}, path)


def compare(a: str, b: str) -> int:
    x, y = torch.load(a), torch.load(b)
    same = {n: torch.equal(x[n], y[n]) for n in x}
    print(f"bit-identical: {same}")
    return 0 if all(same.values()) else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("save", "compare"))
    p.add_argument("paths", nargs="+")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--batch-heads", default="2x8")
    p.add_argument("--kv-heads", type=int, default=2)
    args = p.parse_args()
    if args.what == "save":
        save(args.paths[0], args.seq, args.batch_heads, args.kv_heads)
        return 0
    return compare(*args.paths)


if __name__ == "__main__":
    sys.exit(main())
