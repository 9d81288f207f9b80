"""Speed of the linear GEMM paths on CUDA: bf16 vs fp8 rowwise vs fp8-block (DeepSeek 1x128/128x128).

    python scripts/bench_linear.py                 # 8192 x 8192 x 8192
    python scripts/bench_linear.py --m 16384 --n 4096 --k 4096 --formats bf16 fp8 mxfp8

Two rows per format: the bare GEMM on operands quantized beforehand (the tensor-core
rate, 2·M·N·K FLOPs) and the whole `quantized_linear` forward + backward with its
quantization passes (3 GEMMs, 6·M·N·K FLOPs). mxfp8/nvfp4 are emulated on Hopper
(bf16 products): their rows show the emulation's cost, never a format speed-up.
`--host-profile N`: also run N fwd+bwd steps per format under cProfile and print the host (Python)
time per step and the functions that take it: at gpt-1b's shapes one fp8 linear's launches cost
more CPU than its GPU work, so the step is host-bound (bench_train's `busy` below 100%).
Never imported by the package.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch
from flamia_kernels import linear_gemm as G
from flamia_kernels.linear import LINEAR_FORMATS, quantized_linear
from flamia_kernels.linear_quant import quantize_operand


def _time_ms(fn, iters: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def _gemm_fn(fmt: str, x: torch.Tensor, w: torch.Tensor):
    """A closure running only the fprop product of `fmt` on pre-quantized operands."""
    if fmt == "bf16":
        return lambda: x @ w.t()
    a_kind, w_kind = G.FORMAT_KINDS[fmt]
    kmult = G._k_multiple(fmt)
    split = fmt == "nvfp4"
    a = quantize_operand(x, a_kind, kmult, row_global=split, want_split=split)
    b = quantize_operand(w, w_kind, kmult, want_split=split)
    shape = (x.shape[0], w.shape[0], x.shape[1])
    return lambda: G._product(fmt, a, b, shape, torch.bfloat16, x.device)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, default=8192, help="tokens")
    p.add_argument("--n", type=int, default=8192, help="out_features")
    p.add_argument("--k", type=int, default=8192, help="in_features")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--formats", nargs="+", default=["bf16", "fp8", "fp8-block"], choices=LINEAR_FORMATS)
    p.add_argument("--host-profile", type=int, default=0, metavar="N",
                   help="cProfile N fwd+bwd steps per format: host ms per step and the top functions")
    args = p.parse_args()
    assert torch.cuda.is_available(), "bench_linear.py needs a CUDA device"
    dev = torch.device("cuda")
    torch.manual_seed(0)
    x = torch.randn(args.m, args.k, device=dev, dtype=torch.bfloat16)
    w = (torch.randn(args.n, args.k, device=dev) / args.k**0.5).to(torch.bfloat16)
    dy = torch.randn(args.m, args.n, device=dev, dtype=torch.bfloat16)
    flops = 2 * args.m * args.n * args.k
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  M={args.m} N={args.n} K={args.k}")
    print(f"{'format':<10} {'path':<44} {'GEMM TFLOP/s':>13} {'fwd+bwd TFLOP/s':>16}")
    for fmt in args.formats:
        reason = None if fmt == "bf16" else G.native_reason(fmt, args.m, args.n, args.k, dev)
        gemm_ms = _time_ms(_gemm_fn(fmt, x, w), args.iters)
        xg, wg = x.clone().requires_grad_(True), w.clone().requires_grad_(True)

        def step(xg=xg, wg=wg, fmt=fmt):
            quantized_linear(xg, wg, fmt).backward(dy)

        step_ms = _time_ms(step, max(args.iters // 2, 3))
        if fmt == "bf16":
            path = "torch.mm (bf16)"
        elif reason is None and not G._NATIVE_BROKEN:
            path = "torch._scaled_mm"
        else:
            path = f"emulated: {reason or next(iter(G._NATIVE_BROKEN.values()))}"[:44]
        print(f"{fmt:<10} {path:<44} {flops / gemm_ms / 1e9:>13.0f} {3 * flops / step_ms / 1e9:>16.0f}")
        if args.host_profile:
            _host_profile(fmt, step, args.host_profile, step_ms)


def _host_profile(fmt: str, step, n: int, gpu_ms: float) -> None:
    """Host time per fwd+bwd step (no synchronization inside the loop) and where cProfile sees it."""
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(n):
        step()
    prof.disable()
    host_ms = (time.perf_counter() - t0) * 1e3 / n
    torch.cuda.synchronize()
    print(f"  {fmt}: host {host_ms:.3f} ms per fwd+bwd under cProfile (timed step {gpu_ms:.3f} ms)")
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(15)
    print("\n".join("  " + line for line in out.getvalue().splitlines() if line.strip()))


if __name__ == "__main__":
    main()
