"""Dispatched aten ops of one quantized linear's fprop, dgrad and wgrad, and how many are quantization.

    python scripts/count_linear_ops.py                          # M=2048 K=768 N=3072, fp8 and fp8-block
    python scripts/count_linear_ops.py --m 4096 --formats fp8 --slow-path
    python scripts/count_linear_ops.py --model gpt-125m --formats bf16 fp8 fp8-block   # a model fwd+bwd

Counts every op that reaches the dispatcher (views and allocations included) with a
TorchDispatchMode, per GEMM, and the part of it spent inside `quantize_operand`. Triton
launches count as one each ("kernels"): on a CPU under TRITON_INTERPRET=1 the interpreter's
own tensor bookkeeping (storage copies per argument) is left out, since a GPU launch
dispatches no aten op. `--model` counts one forward + backward of a flamia_train model (bf16
params, attention bf16, every block linear in the format, LM head bf16; the count does not
depend on the token count, so a short sequence stands for a micro-batch). `--slow-path` forces
the PyTorch quantizers (the path before the fused Triton pre-pass, and the one a
stats-recording step takes). Never imported by the package.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from flamia_kernels import linear_gemm as G  # noqa: E402
from flamia_kernels import linear_quant as LQ  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402


class _Counter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: collections.Counter = collections.Counter()
        self.kernels = 0
        self.where = "gemm"
        self.paused = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.paused:
            self.ops[(self.where, str(func.overloadpacket.__name__))] += 1
        return func(*args, **(kwargs or {}))


_MODE: _Counter | None = None


def _patch_launches() -> None:
    """Count a Triton launch as one kernel and hide the interpreter's bookkeeping ops."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    call = interpreter.GridExecutor.__call__

    def counted(self, *args, **kwargs):
        if _MODE is None:
            return call(self, *args, **kwargs)
        _MODE.kernels += 1
        _MODE.paused = True
        try:
            return call(self, *args, **kwargs)
        finally:
            _MODE.paused = False

    interpreter.GridExecutor.__call__ = counted


def _patch_quantize() -> None:
    inner = G.quantize_operand

    def tagged(*args, **kwargs):
        if _MODE is None:
            return inner(*args, **kwargs)
        before, _MODE.where = _MODE.where, "quantize"
        try:
            return inner(*args, **kwargs)
        finally:
            _MODE.where = before

    G.quantize_operand = tagged


@contextlib.contextmanager
def counting():
    global _MODE
    with _Counter() as mode:
        _MODE = mode
        try:
            yield mode
        finally:
            _MODE = None


def count(fmt: str, m: int, k: int, n: int, dtype: torch.dtype, device: str) -> dict:
    torch.manual_seed(0)
    x = torch.randn(m, k, device=device).to(dtype)
    w = (torch.randn(n, k, device=device) / k**0.5).to(dtype)
    dy = torch.randn(m, n, device=device).to(dtype)
    out = {}
    for gemm, fn in (("fprop", lambda: G.fprop(x, w, fmt)), ("dgrad", lambda: G.dgrad(dy, w, fmt)),
                     ("wgrad", lambda: G.wgrad(dy, x, fmt, w.dtype))):
        fn()  # warm: Triton compiles, the native-shape check runs once
        with counting() as mode:
            fn()
        quant = sum(c for (where, _), c in mode.ops.items() if where == "quantize")
        out[gemm] = {"ops": sum(mode.ops.values()), "quantize_ops": quant, "kernels": mode.kernels,
                     "quantize_op_names": sorted({name for (where, name) in mode.ops if where == "quantize"})}
    out["total"] = {key: sum(out[g][key] for g in ("fprop", "dgrad", "wgrad"))
                    for key in ("ops", "quantize_ops", "kernels")}
    return out


def count_model(name: str, fmt: str, seq: int, device: str) -> dict:
    from flamia_train.model import GPT, MODEL_SHAPES

    torch.manual_seed(0)
    model = GPT(MODEL_SHAPES[name]).to(device=device, dtype=torch.bfloat16)
    for label, _, module in model.linear_modules():
        module.set_spec("bf16" if label == "lm_head" else fmt)
    tokens = torch.randint(0, model.cfg.vocab_size, (1, seq), device=device)

    def step():
        model.zero_grad(set_to_none=True)
        model(tokens).float().logsumexp(-1).mean().backward()

    step()
    with counting() as mode:
        step()
    quant = sum(c for (where, _), c in mode.ops.items() if where == "quantize")
    return {"ops": sum(mode.ops.values()), "quantize_ops": quant, "kernels": mode.kernels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--m", type=int, default=2048, help="tokens")
    parser.add_argument("--k", type=int, default=768, help="in_features")
    parser.add_argument("--n", type=int, default=3072, help="out_features")
    parser.add_argument("--formats", nargs="+", default=["fp8", "fp8-block"])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--slow-path", action="store_true", help="force the PyTorch quantizers")
    parser.add_argument("--names", action="store_true", help="list the op names inside quantize_operand")
    parser.add_argument("--model", help="count a model's forward + backward instead (e.g. gpt-125m)")
    parser.add_argument("--seq", type=int, default=128, help="tokens of the --model micro-batch")
    args = parser.parse_args()
    if args.slow_path:
        LQ.can_run_triton = lambda t: False
    _patch_launches()
    _patch_quantize()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.model:
        print(f"{args.model} forward + backward, {args.seq} tokens; "
              f"{'PyTorch quantizers' if args.slow_path else 'default path'}")
        print(f"{'format':<10} {'aten ops':>9} {'in quantize':>12} {'triton kernels':>15}")
        for fmt in args.formats:
            r = count_model(args.model, fmt, args.seq, device)
            print(f"{fmt:<10} {r['ops']:>9} {r['quantize_ops']:>12} {r['kernels']:>15}")
        return
    print(f"M={args.m} K={args.k} N={args.n} {args.dtype} on {device}; "
          f"{'PyTorch quantizers' if args.slow_path else 'default path'}")
    print(f"{'format':<10} {'gemm':<6} {'aten ops':>9} {'in quantize':>12} {'triton kernels':>15}")
    for fmt in args.formats:
        res = count(fmt, args.m, args.k, args.n, getattr(torch, args.dtype), device)
        for gemm in ("fprop", "dgrad", "wgrad", "total"):
            r = res[gemm]
            print(f"{fmt:<10} {gemm:<6} {r['ops']:>9} {r['quantize_ops']:>12} {r['kernels']:>15}")
            if args.names and gemm != "total":
                print("    quantize ops:", ", ".join(r["quantize_op_names"]))


if __name__ == "__main__":
    main()
