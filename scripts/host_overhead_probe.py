"""How much of one isolated attention call is the GPU waiting for the host.

    python scripts/host_overhead_probe.py                      # S = 8k and 16k, D = 128: fp8 and cuDNN
    python scripts/host_overhead_probe.py --seqs 8192 --calls 20 --profile
    python scripts/host_overhead_probe.py --seqs 8192 --parts --launch-costs

Why: a call that starts on an idle GPU (an evaluation loop, a call after a host sync, a training step whose
host is slower than its GPU) waits for every host step before each launch: checks, operand set-up,
allocations, TMA descriptors, Triton's launch path. This times every call twice, alternating, each after an
L2 flush and a synchronize: "single" (the call as it comes) and "ahead" (a `torch.cuda._sleep` queued
between the flush and the start event, long enough for the host to enqueue the whole call while the GPU
sleeps). single − ahead is what the host costs an isolated call. Not what scripts/bench_attention.py's table
reads: its calls are queued without a synchronize between them, so the host runs ahead there.
--profile: for fp8, the kernels of one single call with the GPU idle time before and between them
(torch.profiler), and the host functions that take the time (cProfile, cumulative). --parts: host µs of each
step of the fp8 forward's path, and of a training call's backward; --launch-costs: host µs inside Triton's
launch path and a cProfile by own time. Never imported.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics

import torch
from bench_attention import one_call, peer_fn, shape_for, sleep_cycles
from flamia_kernels import flamia_attention


def readings(entries, do, modes, calls: int, sleep: int) -> dict:
    """{(name, mode, how): [ms]} with how in (single, ahead), every (entry, how) once per call in turn."""
    cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")  # do_bench's L2 flush
    out: dict = {}
    for mode in modes:
        for _, fn in entries:
            one_call(fn, do, mode)  # warm-up: compiles, autotunes
        torch.cuda.synchronize()
        pending = []
        for i in range(calls):
            for name, fn in entries[i % len(entries):] + entries[:i % len(entries)]:
                for how in ("single", "ahead") if i % 2 else ("ahead", "single"):
                    cache.zero_()
                    if how == "ahead":
                        torch.cuda._sleep(sleep)
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    one_call(fn, do, mode)
                    end.record()
                    pending.append(((name, mode, how), start, end))
                    torch.cuda.synchronize()  # the next call's host work starts with an idle GPU, as in the table
        for key, start, end in pending:
            out.setdefault(key, []).append(start.elapsed_time(end))
    return out


def single_call_timeline(fn, do, mode: str) -> None:
    """Kernels of one call after a flush, with the idle gap before each (profiler clock, µs)."""
    from torch.profiler import ProfilerActivity, profile

    cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    for _ in range(3):
        one_call(fn, do, mode)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        cache.zero_()
        one_call(fn, do, mode)
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    events = sorted((e for e in prof.events() if e.device_type == cuda and e.time_range.elapsed_us() > 0),
                    key=lambda e: e.time_range.start)
    print(f"\n{mode}: kernels of one single call (the first is the flush)")
    prev_end = None
    busy = 0.0
    for e in events:
        gap = 0.0 if prev_end is None else e.time_range.start - prev_end
        dur = e.time_range.elapsed_us()
        busy += dur
        print(f"  gap {gap:8.1f}  kernel {dur:8.1f} µs  {e.name[:90]}")
        prev_end = e.time_range.end
    span = events[-1].time_range.end - events[0].time_range.end
    print(f"  call span after the flush {span:.1f} µs, kernels {busy - events[0].time_range.elapsed_us():.1f} µs")


def host_profile(fn, do, mode: str, calls: int) -> None:
    """cProfile of `calls` calls with the GPU running behind (one sync at the end): where host time goes."""
    one_call(fn, do, mode)
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        one_call(fn, do, mode)
    prof.disable()
    torch.cuda.synchronize()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(35)
    print(f"\n{mode}: host profile of {calls} calls (cumulative)\n{buf.getvalue()}")


def host_parts(q, k, v, reps: int = 200) -> None:
    """Host microseconds of each step of the fp8 forward's path (the GPU kept busy by a sleep, so that no
    call waits on it), to show which of them leave the GPU idle."""
    import math
    import time

    from flamia_kernels import attention_fwd, attention_fwd_gluon
    from flamia_kernels import quantize as QZ
    from flamia_kernels.attention import check_inputs
    from flamia_kernels.attention_operands import prepare_forward
    from flamia_kernels.spec import SEQ_BLOCK, AttentionSpec

    spec = AttentionSpec.parse("fp8")
    ops = prepare_forward(q, k, v, spec, True, QZ, SEQ_BLOCK, v_transposed=True, quantize_q=False)
    ops.q = attention_fwd.fused_q_operand(q)
    sm = 1.0 / math.sqrt(q.shape[-1])
    steps = {
        "AttentionSpec.parse('fp8')": lambda: AttentionSpec.parse("fp8"),
        "check_inputs": lambda: check_inputs(q, k, v, spec),
        "fuses_q": lambda: attention_fwd.fuses_q(q, spec, True, True, False),
        "torch.empty (one)": lambda: torch.empty(q.shape, dtype=torch.bfloat16, device=q.device),
        "key pass (quantize_fp8_key_sides)": lambda: QZ.quantize_fp8_key_sides(k, v, SEQ_BLOCK),
        "prepare_forward": lambda: prepare_forward(q, k, v, spec, True, QZ, SEQ_BLOCK, v_transposed=True,
                                                   quantize_q=False),
        "fused_q_operand": lambda: attention_fwd.fused_q_operand(q),
        "gluon descriptors (5)": lambda: attention_fwd_gluon.descriptors(ops.q, ops.k, ops.v),
        "gluon forward (all)": lambda: attention_fwd_gluon.forward(ops.q, ops.k, ops.v, True, sm, False, q_raw=q),
        "attention_fwd.forward": lambda: attention_fwd.forward(ops.q, ops.k, ops.v, spec, True, True, sm,
                                                               SEQ_BLOCK, False, q_raw=q),
        "flamia_attention, no_grad": lambda: flamia_attention(q, k, v, "fp8"),
    }
    print(f"\nhost µs per step (median of 5 × {reps // 5}, GPU busy)")
    for name, fn in steps.items():
        with torch.no_grad():
            fn()
            torch.cuda.synchronize()
            times = []
            for _ in range(5):
                torch.cuda._sleep(sleep_cycles(40.0))
                t0 = time.perf_counter()
                for _ in range(reps // 5):
                    fn()
                times.append((time.perf_counter() - t0) / (reps // 5) * 1e6)
                torch.cuda.synchronize()
        print(f"  {name:40s} {statistics.median(times):8.1f}")
    q2, k2, v2 = (x.detach().requires_grad_(True) for x in (q, k, v))
    times = []
    for _ in range(5):
        torch.cuda._sleep(sleep_cycles(40.0))
        t0 = time.perf_counter()
        for _ in range(4):
            flamia_attention(q2, k2, v2, "fp8")
        times.append((time.perf_counter() - t0) / 4 * 1e6)
        torch.cuda.synchronize()
    print(f"  {'flamia_attention, grad':40s} {statistics.median(times):8.1f}")
    # the backward of one training call: its host time with the GPU busy (the forward and a sleep queued first)
    do = torch.randn_like(q)
    times = []
    for _ in range(reps // 5):
        o = flamia_attention(q2, k2, v2, "fp8")
        torch.cuda._sleep(sleep_cycles(20.0))
        t0 = time.perf_counter()
        o.backward(do)
        times.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
    # the first backward compiles its kernels: left out of the median
    print(f"  {'backward (o.backward)':40s} {statistics.median(times[1:]):8.1f}")


def launch_costs(q, k, v, calls: int = 40) -> None:
    """Host µs per call inside Triton's launch path (JITFunction.run and the pieces it calls, timed by
    wrappers), and a cProfile of grad-mode forwards sorted by own time: where a launch's host time goes."""
    import time

    import triton.backends.nvidia.driver as nv_driver
    import triton.runtime.jit as jit

    totals: dict = {}

    def timed(owner, name, label=None):
        orig = getattr(owner, name)

        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            try:
                return orig(*a, **kw)
            finally:
                key = label or name
                totals[key] = totals.get(key, 0.0) + time.perf_counter() - t0
        setattr(owner, name, wrapper)
        return orig

    for grad in (False, True):
        qq, kk, vv = (x.detach().requires_grad_(grad) for x in (q, k, v))
        flamia_attention(qq, kk, vv, "fp8")
        torch.cuda.synchronize()
        saved = [(jit.JITFunction, "run", timed(jit.JITFunction, "run")),
                 (jit, "compute_cache_key", timed(jit, "compute_cache_key")),
                 (nv_driver, "make_tensordesc_arg", timed(nv_driver, "make_tensordesc_arg")),
                 (nv_driver.CudaLauncher, "__call__", timed(nv_driver.CudaLauncher, "__call__", "CudaLauncher"))]



        totals.clear()
        torch.cuda._sleep(sleep_cycles(80.0))
        t0 = time.perf_counter()
        for _ in range(calls):
            flamia_attention(qq, kk, vv, "fp8")
        wall = (time.perf_counter() - t0) / calls * 1e6
        torch.cuda.synchronize()
        for owner, name, orig in saved:
            setattr(owner, name, orig)
        print(f"\nforward, grad={grad}: {wall:.1f} host µs a call (timing wrappers on)")
        for key, total in totals.items():
            print(f"  {key:28s} {total / calls * 1e6:8.1f} µs a call")
        prof = cProfile.Profile()
        torch.cuda._sleep(sleep_cycles(80.0))
        prof.enable()
        for _ in range(calls):
            flamia_attention(qq, kk, vv, "fp8")
        prof.disable()
        torch.cuda.synchronize()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(30)
        print(buf.getvalue())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", type=int, nargs="+", default=[8192, 16384])
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--calls", type=int, default=16)
    ap.add_argument("--sleep-ms", type=float, default=8.0, help="how far the GPU sleeps ahead of an 'ahead' call")
    ap.add_argument("--profile", action="store_true", help="also the single-call timeline and a host profile")
    ap.add_argument("--parts", action="store_true", help="only the host time of each step of the forward's path")
    ap.add_argument("--launch-costs", action="store_true", help="only the host time inside Triton's launches")
    args = ap.parse_args()
    sleep = sleep_cycles(args.sleep_ms)
    for seq in args.seqs:
        b, h, s, d = shape_for(seq, args.dim)
        gen = torch.Generator(device="cuda").manual_seed(seq)
        q, k, v, do = (torch.randn(b, h, s, d, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(4))
        q, k, v = (x.requires_grad_(True) for x in (q, k, v))
        if args.parts or args.launch_costs:
            if args.parts:
                host_parts(q, k, v)
            if args.launch_costs:
                launch_costs(q.detach(), k.detach(), v.detach())
            continue
        def fresh(fn, leaves=(q, k, v)):  # each call's gradients new, not added to the last (`one_call`'s leaves)
            def run():
                for x in leaves:
                    x.grad = None
                return fn()
            return run

        entries = [("fp8", fresh(lambda q=q, k=k, v=v: flamia_attention(q, k, v, "fp8"))),
                   ("cudnn", fresh(peer_fn("cudnn", q, k, v)))]
        got = readings(entries, do, ("fwd", "fwd+bwd"), args.calls, sleep)
        print(f"\nS={s} B×H={b}×{h} D={d}: median ms of {args.calls} calls")
        for mode in ("fwd", "fwd+bwd"):
            row = {name: {how: statistics.median(got[(name, mode, how)]) for how in ("single", "ahead")}
                   for name, _ in entries}
            for name, r in row.items():
                print(f"  {mode:7s} {name:6s} single {r['single']:7.3f}  ahead {r['ahead']:7.3f}  "
                      f"host cost {r['single'] - r['ahead']:6.3f}")
            for how in ("single", "ahead"):
                print(f"  {mode:7s} fp8 / cuDNN ({how}): {row['cudnn'][how] / row['fp8'][how]:.3f}x")
        if args.profile:
            for mode in ("fwd", "fwd+bwd"):
                single_call_timeline(entries[0][1], do, mode)
                host_profile(entries[0][1], do, mode, 10)


if __name__ == "__main__":
    main()
