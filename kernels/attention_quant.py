"""In-register quantizers of the attention kernels: P and dS tiles, as `reference.quant_rows`.

A [R, C] fp32 tile is quantized along axis 1 (the contraction axis of the
product it feeds), returning ``(vals, scale)`` with ``vals * scale[:, None]``
the dequantized tile and ``vals`` exact in bf16, so an emulated format feeds a
bf16 tensor-core product without further rounding. Format codes:
0 bf16, 1 fp8 (E4M3), 2 mxfp8 (E4M3 + E8M0 per 32), 3 nvfp4 (E2M1 + E4M3 per 16 + fp32).

FIXED selects P's scales (fp8 ×256, NVFP4 global of amax 1, passed in as
P_GLOB); otherwise each row gets its own scale from its amax over the tile
(dS: one scale per row and tile, which is per query row for dQ and per key
row for dK, both safe). Rounding is built from integer bit arithmetic shared
with `quantize` (the interpreter's fp8 cast truncates ties; GPU `/` is
approximate), so these match `formats` bit for bit.
"""
from __future__ import annotations

import torch

from . import formats as F
from ._triton_env import HAS_TRITON

FMT_CODES = {"bf16": 0, "fp8": 1, "mxfp8": 2, "nvfp4": 3}


def fmt_code(fmt: str) -> int:
    """Kernel constexpr code of a format name."""
    return FMT_CODES[fmt]


if HAS_TRITON:
    import triton
    import triton.language as tl

    from .quantize import _abs_bits, _e2m1_code, _e4m3_code, _e4m3_to_f32, _e4m3_value, _fp8_row_codes

    @triton.jit
    def _e4m3_round(v):
        """fp32 -> the E4M3 value it rounds to (nearest-even, saturating at ±448), as fp32."""
        return _e4m3_value(_e4m3_code(v))

    @triton.jit
    def finite_row_max(m, HAS_DOC: tl.constexpr):
        """The row max exp2 is taken against: with documents, a row that has seen no key yet
        keeps M = -inf, and exp2 against 0 then gives its masked scores exact zeros."""
        if HAS_DOC:
            return tl.where(m == float("-inf"), 0.0, m)
        else:
            return m

    @triton.jit
    def to_bf16(x, INTERP: tl.constexpr):
        """fp32 -> bf16, round-to-nearest-even on every backend (the interpreter's cast truncates)."""
        if INTERP:
            bits = x.to(tl.int32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536  # RNE to the top 16 bits (finite x)
            return bits.to(tl.float32, bitcast=True).to(tl.bfloat16)  # exact now, so any cast agrees
        else:
            return x.to(tl.bfloat16)

    @triton.jit
    def mma(a, b, INTERP: tl.constexpr, acc=None):
        """tl.dot with fp32 accumulation, into `acc` where one is given. The interpreter multiplies bf16 bit
        patterns as integers, so there the (exactly representable) operands go in as fp32."""
        if INTERP:
            return tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
        else:
            return tl.dot(a, b, acc)

    @triton.jit
    def p_fp8_scaled(x, INTERP: tl.constexpr):
        """E4M3 of x that already carries P's ×256 (x in [0, 256]): native RNE cast on the GPU."""
        if INTERP:
            return _e4m3_round(x)
        else:
            return x.to(tl.float8e4nv)

    @triton.jit
    def _mx_round(x, R: tl.constexpr, C: tl.constexpr):
        """MXFP8 along axis 1 (32 elements, E8M0 exponent rounded up), dequantized: [R, C] fp32."""
        xb = tl.reshape(x, [R, C // 32, 32])
        amax_bits = tl.max(_abs_bits(xb), 2)
        biased = amax_bits >> 23
        e = biased - (127 + 8) + ((amax_bits & 0x7FFFFF) > 0x600000).to(tl.int32)
        e = tl.minimum(tl.maximum(tl.where(biased == 0, -127, e), -127), 127)
        inv = tl.where(e == 127, 0x400000, (127 - e) << 23).to(tl.float32, bitcast=True)  # 2^-e
        pw = tl.where(e == -127, 0x400000, (e + 127) << 23).to(tl.float32, bitcast=True)  # 2^e
        vals = _e4m3_round(xb * inv[:, :, None]) * pw[:, :, None]  # both products exact
        return tl.reshape(vals, [R, C])

    @triton.jit
    def _nv_round(x, glob, R: tl.constexpr, C: tl.constexpr):
        """NVFP4 along axis 1 (16 elements) with a per-row global `glob` [R]: E2M1 × E4M3 values."""
        xb = tl.reshape(x, [R, C // 16, 16])
        glob2 = tl.broadcast_to(glob[:, None], (R, C // 16))
        amax = tl.max(tl.abs(xb), 2)
        bs = tl.math.div_rn(tl.math.div_rn(amax, tl.full((R, C // 16), 6.0, tl.float32)), glob2)
        bsf = _e4m3_to_f32(_e4m3_code(bs))
        denom = bsf * glob2
        zero = denom == 0
        den3 = tl.broadcast_to(tl.where(zero, 1.0, denom)[:, :, None], (R, C // 16, 16))
        v = tl.where(zero[:, :, None], 0.0, tl.math.div_rn(xb, den3))
        code = _e2m1_code(v, 0.0, False)
        c = code & 7
        mag = tl.where(c < 4, c.to(tl.float32) * 0.5,
                       tl.where(c == 4, 2.0, tl.where(c == 5, 3.0, tl.where(c == 6, 4.0, 6.0))))
        val = tl.where((code & 8) != 0, -mag, mag) * bsf[:, :, None]
        return tl.reshape(val, [R, C])

    @triton.jit
    def quant_rows(x, P_GLOB, FMT: tl.constexpr, FIXED: tl.constexpr, R: tl.constexpr, C: tl.constexpr,
                   TINY: tl.constexpr, INTERP: tl.constexpr):
        """(vals [R, C], scale [R]) of a tile quantized along axis 1 (see the module docstring)."""
        if FMT == 0:
            vals = to_bf16(x, INTERP).to(tl.float32)
            scale = tl.full([R], 1.0, tl.float32)
        elif FMT == 1:
            if FIXED:
                vals = _e4m3_round(x * 256.0)
                scale = tl.full([R], 1.0 / 256.0, tl.float32)
            else:
                amax = tl.max(tl.abs(x), 1)
                scale = tl.math.div_rn(tl.maximum(amax, TINY), tl.full([R], 448.0, tl.float32))
                vals = _e4m3_round(tl.math.div_rn(x, tl.broadcast_to(scale[:, None], (R, C))))
        elif FMT == 2:
            vals = _mx_round(x, R, C)
            scale = tl.full([R], 1.0, tl.float32)
        else:
            if FIXED:
                scale = tl.full([R], 1.0, tl.float32) * P_GLOB
            else:
                amax = tl.max(tl.abs(x), 1)
                scale = tl.math.div_rn(tl.maximum(amax, TINY), tl.full([R], 2688.0, tl.float32))
            vals = _nv_round(x, scale, R, C)
        return vals, scale

    @triton.jit
    def fp8_row_bytes(x, R: tl.constexpr, C: tl.constexpr, TINY: tl.constexpr):
        """Per-row fp8 of a [R, C] fp32 tile as formats.quantize_fp8_per_token: (E4M3 bytes uint8,
        scale [R]), by quantize's per-token kernels' own helper, so non-finite rows give their bytes too."""
        code, scale = _fp8_row_codes(x, R, C, TINY)
        return code.to(tl.uint8), scale


# P's fixed NVFP4 global scale (reference.p_nvfp4_global: formats' global for amax 1), computed once at
# import: a per-call `float(tensor)` is a `.item()` that breaks torch.compile's graph at every attention call.
_P_GLOBAL = float(F.nvfp4_global_scale(torch.tensor(1.0)).to(torch.float32))


def p_global_value() -> float:
    """P's fixed NVFP4 global scale as a Python float holding the exact fp32 value."""
    return _P_GLOBAL
