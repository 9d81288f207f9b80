"""Why do_bench's readings of the fp8 forward move between rounds while cuDNN's do not: one GPU run that times
both forwards (S = 8k, D = 128, the speed table's shape) several ways, interleaved, and prints each way's
spread over its iterations.

    python scripts/fwd_timing_probe.py --seq 8192 --rounds 3

Ways: `do_bench` (the speed table's: L2 flushed before each call, the host free to run ahead); events around
each call back to back (no flush); flushed, with the host held until the flush has run (so any host time of
the call itself lands inside the timed region); and a CUDA graph of the call replayed after each flush (no
host time at all). A diagnostic: the speed table stays `bench_attention.py`'s.
"""
from __future__ import annotations

import argparse
import statistics

import torch
from bench_attention import cuda_stamp, peer_fn, shape_for
from flamia_kernels import flamia_attention


def spread(ms: list[float]) -> str:
    ms = sorted(ms)
    pick = lambda f: ms[min(len(ms) - 1, int(f * len(ms)))]  # noqa: E731
    return (f"min {ms[0]:.3f} p10 {pick(0.1):.3f} median {statistics.median(ms):.3f} p90 {pick(0.9):.3f} "
            f"max {ms[-1]:.3f} (n={len(ms)})")


def events_loop(fn, n: int, flush=None, hold: bool = False) -> list[float]:
    """Milliseconds of each of n calls between two CUDA events; flush: run before each call (outside the
    events); hold: the host waits for the flush before it records the start event and calls fn."""
    readers = []
    for _ in range(n):
        if flush is not None:
            flush()
            if hold:
                torch.cuda.synchronize()
        readers.append(cuda_stamp(fn))
    return [read() for read in readers]


def graphed(fn):
    """fn captured once as a CUDA graph (after warm-up calls on a side stream); returns its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--series", action="store_true", help="also print each call's milliseconds in order (graphs)")
    args = ap.parse_args()
    from triton.testing import do_bench

    b, h, s, d = shape_for(args.seq, 128)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")  # do_bench's L2 flush size
    flush = cache.zero_
    ours = lambda: flamia_attention(q, k, v, "fp8")  # noqa: E731
    impls = {"fp8": ours, "cudnn": peer_fn("cudnn", q, k, v)}
    with torch.no_grad():
        for fn in impls.values():
            fn()
        graphs = {name: graphed(fn) for name, fn in impls.items()}
        for rnd in range(args.rounds):
            for name, fn in impls.items():
                ways = {
                    "do_bench": do_bench(fn, warmup=25, rep=100, return_mode="all"),
                    "back to back": events_loop(fn, args.calls),
                    "flushed, host held": events_loop(fn, args.calls, flush, hold=True),
                    "graph, flushed": events_loop(graphs[name], args.calls, flush),
                }
                for way, ms in ways.items():
                    print(f"round {rnd + 1} {name:6s} {way:20s} {spread(ms)}", flush=True)
                if args.series:  # drift (clocks, heat) or alternation (allocations) shows in the order
                    print(f"round {rnd + 1} {name:6s} graph series: "
                          + " ".join(f"{x:.2f}" for x in ways["graph, flushed"]), flush=True)


if __name__ == "__main__":
    main()
