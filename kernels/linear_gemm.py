"""The three GEMMs of a quantized linear (fprop, dgrad, wgrad) and the path each one runs on.

Per format (docs/linear.md has the table and the reasons):

| format    | X / dY operands (along K)     | W operand                         | CUDA path                      |
| --------- | ----------------------------- | --------------------------------- | ------------------------------ |
| fp8       | per row (token / channel)     | per row of the GEMM's B           | `_scaled_mm` rowwise, sm_89+   |
| fp8-block | 1×128 tiles                   | 128×128 blocks (one copy, both ways) | `_scaled_mm` blockwise, sm_90 |
| mxfp8     | 1×32, E8M0                    | 1×32 along the GEMM's K           | emulated (bf16 products)       |
| nvfp4     | 1×16, E4M3 + fp32 global      | 16×16 blocks (one copy, both ways) | emulated (bf16 products)      |

nvfp4 extras (NVIDIA's NVFP4 pretraining recipe): stochastic rounding of dY in dgrad
and wgrad, and a random Hadamard transform of both wgrad operands along the token dim.
The forward's X takes one global scale per token, not per tensor: a per-tensor amax of
the current batch lets later tokens move earlier tokens' rounding (FLAMIA.md's causal
rule); every other nvfp4 operand uses a per-tensor global scale.

Emulated paths: on the CPU, dequantize to fp32 and multiply in fp32 (bit-exact with a
`formats`-built reference); on CUDA, MXFP8 values and NVFP4's E2M1·E4M3 products are
exact in bf16, so the product runs on bf16 tensor cores and NVFP4's fp32 global scales
are applied to the output, as a Blackwell kernel's epilogue would.
"""
from __future__ import annotations

import warnings

import torch

from .hadamard import RHT_BLOCK, mix_seed, random_hadamard_transform
from .linear_quant import (
    ROWWISE,
    FP8_1x128,
    FP8_128x128,
    Kind,
    MX_1x32,
    NV_1x16,
    NV_16x16,
    QOperand,
    QuantStats,
    quantize_operand,
)

# format -> (kind of the X / dY operands, kind of the weight operand)
FORMAT_KINDS: dict[str, tuple[Kind, Kind]] = {
    "fp8": (ROWWISE, ROWWISE),
    "fp8-block": (FP8_1x128, FP8_128x128),
    "mxfp8": (MX_1x32, MX_1x32),
    "nvfp4": (NV_1x16, NV_16x16),
}
# Seed salts so each random draw of one step and layer is independent of the others.
DGRAD_SR_SALT, WGRAD_SR_SALT, RHT_SALT = 1, 2, 3

_NATIVE_BROKEN: dict[tuple, str] = {}  # (device capability, kinds) -> error text, so we try once
# (capability, format, operand kinds, M, N, K) whose native product was checked against the exact
# emulation once: a scale layout that cuBLAS reads differently from ours gives wrong numbers, not an
# error (seen on the H200: fp8-block training stalled at loss 7.5), so each new GEMM shape is checked.
_NATIVE_CHECKED: set[tuple] = set()
NATIVE_CHECK_TOL = 2e-2  # rel L2 vs the exact product: bf16 output rounding is ~2e-3
_WARNED: set[str] = set()


def _warn_once(reason: str) -> None:
    if reason not in _WARNED:
        _WARNED.add(reason)
        warnings.warn(f"flamia_kernels.linear: emulated GEMM: {reason}", stacklevel=3)


def native_reason(fmt: str, m: int, n: int, k: int, device: torch.device) -> str | None:
    """None if ``[m, k]·[n, k]ᵀ`` in `fmt` can run through `torch._scaled_mm`, else why not."""
    if fmt not in ("fp8", "fp8-block"):
        return f"{fmt} has no Hopper tensor-core path (native only on Blackwell)"
    if device.type != "cuda":
        return f"{device.type} device"
    cap = torch.cuda.get_device_capability(device)
    if fmt == "fp8":
        if cap < (8, 9):
            return f"fp8 rowwise _scaled_mm needs sm_89+, device is sm_{cap[0]}{cap[1]}"
        if k % 16 or n % 16:
            return f"fp8 rowwise _scaled_mm needs K and N multiples of 16, got M={m} N={n} K={k}"
    else:
        if cap[0] != 9:
            return f"blockwise (1x128/128x128) _scaled_mm runs on sm_90 only, device is sm_{cap[0]}{cap[1]}"
        if k % 128 or n % 128 or m % 128:
            return f"blockwise _scaled_mm here needs M, N, K multiples of 128, got M={m} N={n} K={k}"
    broken = _NATIVE_BROKEN.get((cap, fmt))
    return f"_scaled_mm failed earlier: {broken}" if broken else None


def _aten_scale(op: QOperand, second: bool) -> torch.Tensor:
    """Scale of `op` in the layout ATen's ScaledBlas.cpp checks (second: it is mat2 = Bᵀ)."""
    s = op.scale
    if op.kind is ROWWISE:
        return s.reshape(1, -1) if second else s.contiguous()  # (1, N) / (M, 1)
    if op.kind.is_2d:
        return s.contiguous().t() if second else s.contiguous()  # 128x128: inner-dim-major
    return s.t().contiguous() if second else s.t().contiguous().t()  # 1x128: outer-dim-major


def _native_mm(a: QOperand, b: QOperand, out_dtype: torch.dtype) -> torch.Tensor:
    """``A·Bᵀ`` via torch._scaled_mm: mat1 row-major [M, K], mat2 = Bᵀ column-major [K, N]."""
    # cuBLASLt takes only row-major mat1 and column-major mat2; dgrad/wgrad operands arrive as
    # transposed views (seen on the H200: "Only multiplication of row-major and column-major matrices").
    out = torch._scaled_mm(a.data.contiguous(), b.data.contiguous().t(), _aten_scale(a, False),
                           _aten_scale(b, True), out_dtype=torch.bfloat16)
    return out.to(out_dtype)


def _emulated_mm(a: QOperand, b: QOperand) -> torch.Tensor:
    """fp32 ``A·Bᵀ``: bf16 tensor cores for exact-in-bf16 values on CUDA, else fp32 on dequantized values."""
    if a.unit is not None or (a.values is not None and a.values.is_cuda and a.kind.fmt == "mxfp8"):
        ua, ub = (op.values if op.unit is None else op.unit for op in (a, b))
        out = (ua.bfloat16() @ ub.bfloat16().t()).float()  # exact products, fp32 accumulation
        if a.post is not None:
            out = out * a.post  # (M, 1) or (1, 1)
        if b.post is not None:
            out = out * b.post.t()
        return out
    return a.dense() @ b.dense().t()


def _product(fmt: str, a: QOperand, b: QOperand, shape: tuple[int, int, int], out_dtype, device):
    """``A·Bᵀ`` [M, N] in out_dtype for the unpadded (M, N, K), natively when it can."""
    m, n, k = shape
    reason = native_reason(fmt, m, n, k, device)
    if reason is None:
        cap = torch.cuda.get_device_capability(device)
        try:
            out = _native_mm(a, b, out_dtype)
            key = (cap, fmt, a.kind, b.kind, m, n, k)
            if key in _NATIVE_CHECKED:
                return out
            exact = _emulated_mm(a, b)[:m, :n]
            err = ((out[:m, :n].float() - exact).norm() / exact.norm().clamp_min(1e-30)).item()  # once per shape
            if err <= NATIVE_CHECK_TOL:
                _NATIVE_CHECKED.add(key)
                return out
            kinds = f"{a.kind.rows}x{a.kind.cols} / {b.kind.rows}x{b.kind.cols}"
            _NATIVE_BROKEN[(cap, fmt)] = (f"native result differs from the exact emulation (rel L2 {err:.3g} "
                                          f"at M={m} N={n} K={k}, scale blocks {kinds})")
            reason = f"_scaled_mm check failed: {_NATIVE_BROKEN[(cap, fmt)]}"
            _warn_once(reason)
        except (RuntimeError, NotImplementedError) as err:  # e.g. a cuBLAS too old for blockwise
            _NATIVE_BROKEN[(cap, fmt)] = str(err).strip().splitlines()[0]
            reason = f"_scaled_mm raised: {_NATIVE_BROKEN[(cap, fmt)]}"
    if device.type == "cuda" and fmt in ("fp8", "fp8-block"):
        _warn_once(reason)
    return _emulated_mm(a, b)[:m, :n].to(out_dtype)


def _k_multiple(fmt: str) -> int:
    """Padding unit of the contraction dim: the widest K block of the format's operands."""
    a_kind, w_kind = FORMAT_KINDS[fmt]
    return max(a_kind.cols, w_kind.cols, w_kind.rows, 1)


def _generator(seed: int, salt: int, device: torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(mix_seed(seed, salt))


def _opts(fmt: str, device: torch.device, stats: QuantStats | None) -> dict:
    return {"want_split": device.type == "cuda" and fmt == "nvfp4", "stats": stats}


def fprop(x: torch.Tensor, w: torch.Tensor, fmt: str, stats: QuantStats | None = None) -> torch.Tensor:
    """Y [T, out] = X [T, in] · Wᵀ ([out, in]) in `fmt`, in x's dtype (no bias)."""
    a_kind, w_kind = FORMAT_KINDS[fmt]
    kmult, opts = _k_multiple(fmt), _opts(fmt, x.device, stats)
    a = quantize_operand(x, a_kind, kmult, row_global=fmt == "nvfp4", key="fprop.x", **opts)
    b = quantize_operand(w, w_kind, kmult, key="fprop.w", **opts)
    return _product(fmt, a, b, (x.shape[0], w.shape[0], x.shape[1]), x.dtype, x.device)


def dgrad(dy: torch.Tensor, w: torch.Tensor, fmt: str, stats: QuantStats | None = None,
          seed: int = 0) -> torch.Tensor:
    """dX [T, in] = dY [T, out] · W ([out, in]) in `fmt`, in dy's dtype.

    nvfp4 rounds dY stochastically (draws from `seed`). 2-D weight blocks are quantized
    in W's own orientation, exactly as in fprop, and transposed: one quantized copy.
    """
    a_kind, w_kind = FORMAT_KINDS[fmt]
    kmult, opts = _k_multiple(fmt), _opts(fmt, dy.device, stats)
    sr = fmt == "nvfp4"
    gen = _generator(seed, DGRAD_SR_SALT, dy.device) if sr else None
    a = quantize_operand(dy, a_kind, kmult, stochastic=sr, generator=gen, key="dgrad.dy", **opts)
    if w_kind.is_2d:  # quantized in W's orientation (fprop's blocks), handed over transposed
        b = quantize_operand(w, w_kind, kmult, key="dgrad.w", transposed=True, **opts)
    else:
        b = quantize_operand(w.t(), w_kind, kmult, key="dgrad.w", **opts)
    return _product(fmt, a, b, (dy.shape[0], w.shape[1], dy.shape[1]), dy.dtype, dy.device)


def wgrad(dy: torch.Tensor, x: torch.Tensor, fmt: str, out_dtype: torch.dtype,
          stats: QuantStats | None = None, seed: int = 0, rht: bool | None = None) -> torch.Tensor:
    """dW [out, in] = dYᵀ ([T, out]) · X ([T, in]) in `fmt`, contracting over tokens.

    Both operands use the format's X/dY kind along the token dim. nvfp4 rotates both by a
    random Hadamard transform (`rht`, default on for nvfp4; seeded by `seed`) and rounds
    dY stochastically.
    """
    a_kind, _ = FORMAT_KINDS.get(fmt, (None, None))
    a_src, b_src = dy.t(), x.t()  # (out, T), (in, T)
    if rht if rht is not None else fmt == "nvfp4":
        a_src, b_src = (_rotate(t, seed) for t in (a_src, b_src))
    if fmt == "bf16":  # only reached with rht=True: the transform alone, unquantized
        return (a_src @ b_src.t()).to(out_dtype)
    kmult, opts = _k_multiple(fmt), _opts(fmt, dy.device, stats)
    sr = fmt == "nvfp4"
    gen = _generator(seed, WGRAD_SR_SALT, dy.device) if sr else None
    a = quantize_operand(a_src, a_kind, kmult, stochastic=sr, generator=gen, key="wgrad.dy", **opts)
    b = quantize_operand(b_src, a_kind, kmult, key="wgrad.x", **opts)
    return _product(fmt, a, b, (dy.shape[1], x.shape[1], dy.shape[0]), out_dtype, dy.device)


def _rotate(t: torch.Tensor, seed: int) -> torch.Tensor:
    """t [R, T] zero-padded to T % 16 == 0 and rotated along T (fp32); padding keeps a·bᵀ exact."""
    pad = -t.shape[1] % RHT_BLOCK
    tp = torch.nn.functional.pad(t.float(), (0, pad)) if pad else t
    return random_hadamard_transform(tp, mix_seed(seed, RHT_SALT))
