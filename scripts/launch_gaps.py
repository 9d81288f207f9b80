"""Where one fp8 attention call's wall time goes on CUDA: each kernel's time, the idle gaps between them,
and the host time to enqueue the call.

    python scripts/launch_gaps.py                 # S = 8k, B×H = 4×16, D = 128: forward (no_grad), training fwd+bwd
    python scripts/launch_gaps.py --seq 16384 --calls 5
    python scripts/launch_gaps.py --launch ws.json   # under launch options ({"fwd": {...}, "bwd": {...}})

Why: a forward is four kernels (K's and Vᵀ's key-side passes, the attention kernel, Q quantized in it) that
take ~1.8 ms on the GPU, against one cuDNN kernel; scripts/bench_attention.py times a call from its first
launch to its last kernel's end, so GPU time lost while the host prepares the next launch (descriptors,
Python-side checks) counts against it. This prints, from a torch.profiler trace, every CUDA kernel of
`--calls` calls run back to back with its duration and the gap since the previous kernel ended (listed for
the last call, when the host has had the earlier ones to get ahead), the sum of the gaps per call, and the
host's enqueue time per call (time.perf_counter around calls that do not synchronize).
Never imported by the package.
"""
from __future__ import annotations

import argparse
import time

import torch
from bench_attention import one_call, shape_for
from flamia_kernels import flamia_attention
from launch_configs import launch_overrides, load_launch


def host_ms(fn, calls: int) -> float:
    """Host milliseconds per call to enqueue fn (the GPU runs behind; one sync at the end)."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls * 1e3
    torch.cuda.synchronize()
    return host


def kernel_timeline(fn, calls: int) -> list[tuple[str, float, float]]:
    """(name, start µs, duration µs) of every CUDA kernel of `calls` calls, in start order."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(calls):  # back to back, as a training loop or do_bench's repetitions run them: the
            fn()  # host gets ahead of the GPU unless it needs longer per call than the GPU does
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    events = [e for e in prof.events() if e.device_type == cuda and e.time_range.elapsed_us() > 0]
    events.sort(key=lambda e: e.time_range.start)
    return [(e.name, e.time_range.start, e.time_range.elapsed_us()) for e in events]


def report(label: str, fn, calls: int) -> None:
    timeline = kernel_timeline(fn, calls)
    per_call = max(1, len(timeline) // calls)
    print(f"\n{label}: {len(timeline)} kernels over {calls} calls ({per_call} per call); host enqueue "
          f"{host_ms(fn, 20):.3f} ms per call", flush=True)
    gaps, busy = [], []
    for c in range(calls):
        chunk = timeline[c * per_call:(c + 1) * per_call]
        gap = sum(max(0.0, s - (ps + pd)) for (_, ps, pd), (_, s, _) in zip(chunk, chunk[1:], strict=False))
        gaps.append(gap)
        busy.append(sum(d for _, _, d in chunk))
        if c == calls - 1:
            prev_end = None
            for name, start, dur in chunk:
                idle = 0.0 if prev_end is None else start - prev_end
                print(f"  {dur:9.1f} µs  after {idle:7.1f} µs idle  {name[:90]}", flush=True)
                prev_end = start + dur
    print(f"  per call: kernels {sum(busy) / calls / 1e3:.3f} ms, gaps between them {sum(gaps) / calls / 1e3:.3f} ms",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--preset", default="fp8", help="the FLAMIA preset timed (default fp8)")
    ap.add_argument("--launch", type=load_launch, default=None,
                    help="JSON {\"fwd\": {...}, \"bwd\": {...}} of launch options for every fp8 call")
    args = ap.parse_args()
    b, h, s, d = shape_for(args.seq, 128)
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))

    def forward():
        with torch.no_grad():
            flamia_attention(q, k, v, args.preset)

    def train_step():
        one_call(lambda: flamia_attention(qg, kg, vg, args.preset), do, "fwdbwd", (qg, kg, vg))

    def cudnn():
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with torch.no_grad(), sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    print(f"B={b} H={h} S={s} D={d}" + (f", launch {args.launch}" if args.launch else ""), flush=True)
    with launch_overrides(args.launch):
        report(f"{args.preset} forward (no_grad)", forward, args.calls)
        report("cuDNN forward (no_grad)", cudnn, args.calls)
        report(f"{args.preset} training step (fwd+bwd)", train_step, args.calls)


if __name__ == "__main__":
    main()
