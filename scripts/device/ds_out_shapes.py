"""fwd+bwd of the fp8 preset with launch option ds_out (the default budget) and without (FLAMIA_DS_OUT_BYTES=0, read
at each backward), at shapes the speed table does not cover — short context, GQA — alternating single calls, the
median of each; and the gradients of the two compared bit for bit.
    python scripts/device/ds_out_shapes.py"""
from __future__ import annotations

import os

import torch
from flamia_kernels import flamia_attention

SHAPES = [(16, 16, 16, 2048), (2, 32, 8, 8192), (1, 16, 2, 16384)]  # (B, Hq, Hkv, S), D = 128
CALLS = 15


def _use(name: str) -> None:
    """"default": ds_out at its default budget; "off": FLAMIA_DS_OUT_BYTES=0 (the dQ kernel)."""
    if name == "default":
        os.environ.pop("FLAMIA_DS_OUT_BYTES", None)
    else:
        os.environ["FLAMIA_DS_OUT_BYTES"] = "0"


def _step(q, k, v, do):
    for t in (q, k, v):
        t.grad = None
    flamia_attention(q, k, v, "fp8").backward(do)
    return q.grad, k.grad, v.grad


def main() -> None:
    print(torch.cuda.get_device_name(), flush=True)
    for b, hq, hkv, s in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(s + hq)
        q = torch.randn(b, hq, s, 128, device="cuda", generator=gen, dtype=torch.bfloat16).requires_grad_(True)
        k, v = (torch.randn(b, hkv, s, 128, device="cuda", generator=gen, dtype=torch.bfloat16).requires_grad_(True)
                for _ in range(2))
        do = torch.randn(b, hq, s, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
        grads, times = {}, {"default": [], "off": []}
        for name in ("default", "off", "default", "off"):  # warm-up and the bits
            _use(name)
            grads[name] = [g.clone() for g in _step(q, k, v, do)]
        for _ in range(CALLS):
            for name in ("default", "off"):
                _use(name)
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                _step(q, k, v, do)
                end.record()
                torch.cuda.synchronize()
                times[name].append(start.elapsed_time(end))
        med = {n: sorted(t)[len(t) // 2] for n, t in times.items()}
        same = [torch.equal(a, c) for a, c in zip(grads["default"], grads["off"], strict=True)]
        print(f"B={b} Hq={hq} Hkv={hkv} S={s}: fwd+bwd {med['default']:.3f} ms with ds_out, {med['off']:.3f} without "
              f"({med['off'] / med['default']:.3f}x); dQ, dK, dV bit-identical {same}", flush=True)
    _use("default")


if __name__ == "__main__":
    main()
