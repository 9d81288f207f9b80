"""Session 24: the warp-specialized dK/dV kernel's off-diagonal loop over groups of sub-tiles (launch option dkdv_group:
each sub-tile's dV and dK in flight during the next one's elementwise work, everything retired at the group's end)
against its one-sub-tile loop (group 0, the default): the kernel's time alone (torch.profiler over fp8 training calls,
the dQ kernel on the caller's stream) and dQ, dK, dV bit for bit against the first group's (the same products and
sums in the same order).

    python scripts/device/dkdv_group_probe.py [--seqs 8192 16384] [--groups 0 2 1 4 0]
Runs at 89c2aff, where the launch option exists (reverted after this measurement: docs/benchmarks.md, session 24).
Never imported by the package.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: launch_configs, bench_attention


def training_call(q, k, v, do, group: int) -> list[torch.Tensor]:
    """dQ, dK, dV of one fp8 call, the dQ kernel on the caller's stream so that the dK/dV kernel runs alone."""
    from flamia_kernels import flamia_attention
    from launch_configs import launch_overrides

    xs = [t.detach().requires_grad_(True) for t in (q, k, v)]
    with launch_overrides({"bwd": {"dq_stream": None, "dkdv_group": group}}):
        flamia_attention(*xs, spec="fp8").backward(do)
    return [x.grad for x in xs]


def kernel_us(operands, group: int, name: str = "_dkdv_ws_kernel", calls: int = 5) -> list[float]:
    """Each call's duration of the CUDA kernels whose name contains `name`, µs, sorted."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            training_call(*operands, group)
        torch.cuda.synchronize()
    return sorted(e.time_range.elapsed_us() for e in prof.events() if name in e.name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", type=int, nargs="+", default=[8192, 16384])
    ap.add_argument("--groups", type=int, nargs="+", default=[0, 2, 1, 4, 0])
    args = ap.parse_args()
    from bench_attention import shape_for

    for seq in args.seqs:
        b, h, s, d = shape_for(seq, 128)
        gen = torch.Generator(device="cuda").manual_seed(seq)
        operands = [torch.randn(b, h, s, d, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(4)]
        ref = None
        for group in args.groups:
            grads = training_call(*operands, group)
            torch.cuda.synchronize()
            ref = grads if ref is None else ref
            same = all(torch.equal(a, b) for a, b in zip(grads, ref, strict=True))
            times = kernel_us(operands, group)
            print(f"S={seq} group={group}: dK/dV kernel median {times[len(times) // 2]:8.1f} µs "
                  f"({', '.join(f'{t:.0f}' for t in times)}); dQ, dK, dV bit-identical to group={args.groups[0]}: "
                  f"{same}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
