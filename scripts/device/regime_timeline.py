"""Where a timed call's milliseconds go in bench_attention.py's own regime (alternating calls, each after an
L2 flush, timed by CUDA events): per implementation and mode, the events' reading against the sum of the call's
kernels, the idle time between them and the delay from the flush's end to the call's first kernel.

    python scripts/device/regime_timeline.py --seq 8192 --calls 6

Why: at 8k on the H200 (session 28) the fp8 fwd+bwd read 7.705 ms by events while its kernels summed to 7.315 ms
back to back; whether the 0.39 ms is idle GPU (host, syncs) or slower kernels (clocks, cold L2) decides what to
build next. The flush here is a bitwise_not over do_bench's 256 MB buffer (the same traffic as its zero_, but a
kernel name no implementation launches), so each call's kernels are those between two flushes.
Never imported by the package.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_attention import one_call, peer_fn, shape_for  # noqa: E402
from flamia_kernels import flamia_attention  # noqa: E402

FLUSH = "bitwise_not"


def calls_of(events) -> list[list[tuple[str, float, float]]]:
    """The kernels (name, start µs, duration µs) between consecutive flushes, the flush first in each."""
    chunks: list[list] = []
    for e in events:
        if FLUSH in e[0]:
            chunks.append([e])
        elif chunks:
            chunks[-1].append(e)
    return chunks


def summary(chunk) -> dict:
    flush_end = chunk[0][1] + chunk[0][2]
    kernels = chunk[1:]
    lead = kernels[0][1] - flush_end
    busy = sum(d for _, _, d in kernels)
    span = kernels[-1][1] + kernels[-1][2] - kernels[0][1]
    return dict(lead=lead, busy=busy, span=span, idle=span - busy, n=len(kernels))


def regime_inputs(seq: int):
    """The bench's inputs at S = seq, D = 128 (q, k, v requiring gradients, and dO), seeded as
    bench_attention.py seeds them, and do_bench's 256 MB L2-flush buffer."""
    b, h, s, d = shape_for(seq, 128)
    gen = torch.Generator(device="cuda").manual_seed(s + d)
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(4))
    q, k, v = (x.requires_grad_(True) for x in (q, k, v))
    return q, k, v, do, torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--calls", type=int, default=6)
    ap.add_argument("--presets", default="fp8;fp8-bf16dq")
    args = ap.parse_args()
    from torch.profiler import ProfilerActivity, profile

    q, k, v, do, cache = regime_inputs(args.seq)
    entries = [(p, lambda p=p: flamia_attention(q, k, v, p)) for p in args.presets.split(";")]
    entries.append(("cudnn", peer_fn("cudnn", q, k, v)))
    b, h, s, d = q.shape
    print(f"{torch.cuda.get_device_name()}: B={b} H={h} S={s} D={d}", flush=True)
    for mode in ("fwd", "fwdbwd"):
        for _, fn in entries:  # warm-up: compiles, plans, allocator
            one_call(fn, do, mode, (q, k, v))
        torch.cuda.synchronize()
        order, stamps = [], []
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(args.calls):
                k0 = i % len(entries)
                for name, fn in entries[k0:] + entries[:k0]:
                    cache.bitwise_not_()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    one_call(fn, do, mode, (q, k, v))
                    end.record()
                    order.append(name)
                    stamps.append((start, end))
            torch.cuda.synchronize()
        cuda = torch.autograd.DeviceType.CUDA
        events = sorted(((e.name, e.time_range.start, e.time_range.elapsed_us()) for e in prof.events()
                         if e.device_type == cuda and e.time_range.elapsed_us() > 0), key=lambda e: e[1])
        chunks = calls_of(events)
        if len(chunks) != len(order):
            print(f"  {mode}: {len(chunks)} flushes found for {len(order)} calls; skipped", flush=True)
            continue
        per: dict = {}
        for name, chunk, (start, end) in zip(order, chunks, stamps, strict=True):
            row = summary(chunk)
            row["events"] = start.elapsed_time(end) * 1e3
            per.setdefault(name, []).append((row, chunk))
        for name, rows in per.items():
            med = {key: statistics.median(r[key] for r, _ in rows) for key in rows[0][0]}
            print(f"  {mode:6s} {name:10s} events {med['events'] / 1e3:7.3f} ms | kernels {med['busy'] / 1e3:7.3f} "
                  f"| span {med['span'] / 1e3:7.3f} | idle inside {med['idle']:7.1f} µs | flush→first kernel "
                  f"{med['lead']:6.1f} µs | {med['n']:.0f} kernels", flush=True)
        for name, rows in per.items():  # the last call of each: every kernel and the idle time before it
            chunk = rows[-1][1]
            print(f"\n  {mode} {name}, last call:", flush=True)
            prev = chunk[0][1] + chunk[0][2]
            for kname, start, dur in chunk[1:]:
                print(f"    {dur:9.1f} µs after {start - prev:7.1f} µs idle  {kname[:80]}", flush=True)
                prev = start + dur


if __name__ == "__main__":
    main()
