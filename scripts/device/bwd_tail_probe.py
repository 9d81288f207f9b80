"""Where the last ~0.1 ms of a timed fp8 forward + backward goes (bench_attention.py's regime: each call after an L2
flush, timed by CUDA events, the host free to run ahead): CUDA events recorded at four host points of the call, and
the host's own clock at each.

    python scripts/device/bwd_tail_probe.py --seq 8192 --calls 8

Why: session 36's regime_timeline read the fp8 call's events at 6.804 ms against its kernels' span of 6.695 at 8k on
an H100 (cuDNN's: 7.168 against 7.165), with ≤ 4 µs idle between kernels and 3.3 µs before the first: ~0.1 ms
after the last kernel. An event's GPU time is the later of "the work before it is done" and "the host enqueued it",
so a gap between two events' GPU times that matches the host's time between them is the GPU waiting for the host.
Never imported by the package.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from flamia_kernels import attention_bwd, flamia_attention  # noqa: E402
from regime_timeline import regime_inputs  # noqa: E402  (scripts/device/ is this script's first sys.path entry)

MARKS = ("start", "forward returned", "backward kernels entered", "backward kernels returned", "end")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--preset", default="fp8")
    args = ap.parse_args()
    q, k, v, do, cache = regime_inputs(args.seq)
    b, h, s, d = q.shape
    marks: list = []

    def mark():
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        marks.append((e, time.perf_counter()))

    original = attention_bwd.backward

    def traced(*a, **kw):
        mark()
        out = original(*a, **kw)
        mark()
        return out

    attention_bwd.backward = traced
    rows = []
    for i in range(args.calls + 2):  # two warm-up calls
        for x in (q, k, v):
            x.grad = None
        cache.bitwise_not_()
        marks.clear()
        mark()
        o = flamia_attention(q, k, v, args.preset)
        mark()
        o.backward(do)
        mark()
        calls = list(marks)
        torch.cuda.synchronize()
        if i >= 2:
            e0, h0 = calls[0]
            rows.append([(e0.elapsed_time(e) * 1e3, (t - h0) * 1e6) for e, t in calls])
    print(f"{torch.cuda.get_device_name()}: B={b} H={h} S={s} D={d}, {args.preset}, median of {len(rows)} calls "
          f"(µs since the start event: GPU time, host time)")
    for j, name in enumerate(MARKS):
        gpu = statistics.median(r[j][0] for r in rows)
        host = statistics.median(r[j][1] for r in rows)
        print(f"  {name:26s} GPU {gpu:9.1f}   host {host:9.1f}")
    for r in rows[-3:]:
        print("  call:", "  ".join(f"{g:.0f}/{t:.0f}" for g, t in r))


if __name__ == "__main__":
    main()
