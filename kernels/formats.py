"""Bit-exact ground truth for FLAMIA's low-precision formats, in plain PyTorch.

Every other quantizer in the project (the Triton pre-pass in `quantize.py`,
the attention kernels, the reference attention) must reproduce these bytes
and scales exactly; the tests compare with `torch.equal`.

Formats (see /work/shared/FLAMIA.md):

- ``fp8``   E4M3 (``float8_e4m3fn``) with an fp32 scale per token
  (:func:`quantize_fp8_per_token`, causally safe) or per block of tokens
  (:func:`quantize_fp8_token_blocks`, key side off the diagonal only).
- ``mxfp8`` E4M3 with an E8M0 (power-of-two) scale per 32 elements along the
  last dim; the exponent is rounded *up* so that no element saturates.
- ``nvfp4`` E2M1 with an E4M3 scale per 16 elements along the last dim and an
  fp32 global scale (per tensor, or per token for activations).

Conventions shared by all quantizers:

- Scales are fp32 and computed with true IEEE division (no reciprocals).
- Element rounding is round-to-nearest-even and saturating: values are
  clamped to the format's max before the cast, so nothing becomes NaN by
  overflow.
- Non-finite inputs are *propagated*, never checked: a check would cost a
  host sync per call on the GPU, and the trainer's NaN guard sees the loss
  anyway. A scale group (a token for fp8, an MX block, an NVFP4 global-scale
  group) that contains NaN or ±Inf dequantizes to all-NaN; other groups are
  untouched. Bit-exactness between implementations is promised for finite
  inputs only (NaN payloads and signs may differ).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite E4M3 (fn) value
E2M1_MAX = 6.0  # largest E2M1 value
# Smallest amax a scale is computed from, so an all-zero token gets a finite,
# non-zero scale (0 / scale = 0, never 0 / 0). A power of two (~9.1e-13, the
# order of torchao's 1e-12) so every implementation holds it exactly, and small
# enough that a product of two fp8 scales (the attention kernels fold s_q * s_k)
# stays a normal fp32 number.
FP8_TINY = 2.0**-40
MX_BLOCK = 32
NVFP4_BLOCK = 16
E8M0_BIAS = 127
E8M0_NAN = 255  # OCP MX: the all-ones E8M0 code is NaN
NVFP4_GLOBAL_DIVISOR = FP8_MAX * E2M1_MAX  # 2688: global = amax / (448 * 6)

# E2M1 magnitudes by 3-bit code (sign is bit 3), and the gap to the next code.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_E2M1_STEPS = (0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 2.0, 0.0)
_FORMATS = ("bf16", "fp8", "mxfp8", "nvfp4")


def _check_last_dim(x: torch.Tensor, block: int, what: str) -> None:
    """Raise ValueError unless the last dim of `x` splits into whole `block`s."""
    if block <= 0 or x.shape[-1] % block:
        raise ValueError(
            f"{what}: last dim (head_dim) = {x.shape[-1]} is not a multiple of the block size {block}"
        )


def _saturate_to_fp8(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> float8_e4m3fn, round-to-nearest-even, clamped to ±448 first (NaN stays NaN)."""
    return v.clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


# ---------------------------------------------------------------- fp8 (E4M3 + fp32)


def _div(x: torch.Tensor, divisor: float) -> torch.Tensor:
    """IEEE ``x / divisor`` on every device.

    PyTorch's CUDA division by a Python (CPU) scalar multiplies by the scalar's reciprocal,
    which differs from true division in the last bit for some inputs; the Triton pre-pass
    divides with `div_rn`. A 0-dim tensor on x's device takes the true-division kernel.
    """
    return x / torch.full((), divisor, dtype=x.dtype, device=x.device)


def fp8_scale(amax: torch.Tensor) -> torch.Tensor:
    """fp32 scale that maps `amax` onto 448: ``max(amax, FP8_TINY) / 448``."""
    return _div(amax.float().clamp_min(FP8_TINY), FP8_MAX)


def quantize_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """E4M3 bytes of ``x / scale`` (IEEE division, RNE, saturating); `scale` broadcasts to `x`."""
    return _saturate_to_fp8(x.float() / scale)


def dequantize_fp8(x8: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """fp32 values ``x8 * scale``."""
    return x8.float() * scale


def quantize_fp8_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token fp8, the causally safe query-side quantizer.

    x: [..., S, D] any float dtype. Returns (x8 [..., S, D] float8_e4m3fn,
    scale [..., S, 1] fp32) with one scale per token from its amax over D.
    """
    scale = fp8_scale(x.abs().amax(dim=-1, keepdim=True))
    return quantize_fp8(x, scale), scale


def _token_block_view(x: torch.Tensor, block: int) -> torch.Tensor:
    """[..., S, D] -> [..., S // block, block, D]; ValueError if S is not a multiple of block."""
    if x.dim() < 2:
        raise ValueError(f"token-block quantization needs x of shape [..., S, D], got {tuple(x.shape)}")
    seq = x.shape[-2]
    if block <= 0 or seq % block:
        raise ValueError(
            f"token-block fp8: sequence length S = {seq} is not a multiple of the block size {block}"
        )
    return x.reshape(*x.shape[:-2], seq // block, block, x.shape[-1])


def quantize_fp8_token_blocks(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 with one scale per `block` consecutive tokens × all of D (key side, off-diagonal tiles).

    x: [..., S, D]. Returns (x8 [..., S, D] float8_e4m3fn, scale [..., S // block, 1, 1]
    fp32); the scale broadcasts against ``x.view(..., S // block, block, D)``, see
    :func:`dequantize_fp8_token_blocks`. Leaks inside a block: not causally safe on
    diagonal tiles. ValueError if S is not a multiple of `block`.
    """
    xb = _token_block_view(x, block)
    scale = fp8_scale(xb.abs().amax(dim=(-2, -1), keepdim=True))
    return quantize_fp8(xb, scale).reshape(x.shape), scale


def dequantize_fp8_token_blocks(x8: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """fp32 [..., S, D] from token-block bytes and their [..., S // block, 1, 1] scales."""
    block = x8.shape[-2] // scale.shape[-3]
    return dequantize_fp8(_token_block_view(x8, block), scale).reshape(x8.shape)


def requantize_fp8_token_blocks(
    x8: torch.Tensor, scale: torch.Tensor, block: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The off-diagonal copy of per-token fp8 key-side bytes: token-block fp8 of their fp32 values.

    x8 [..., S, D] float8_e4m3fn with per-token `scale` [..., S, 1] -> (bytes [..., S, D],
    scale [..., S // block, 1, 1]) = ``quantize_fp8_token_blocks(x8 * scale, block)``. Built from
    the saved per-token bytes rather than from the bf16 input, so the backward re-derives the very
    bytes the forward used from what the forward saved (FLAMIA.md: never quantize for the backward
    by a different rule). A second rounding (~1.4x the per-token error of K or V); it leaks inside
    a block, so the kernels read it only off the causal diagonal.
    """
    return quantize_fp8_token_blocks(dequantize_fp8(x8, scale), block)


P_ORDER_CHUNK = 32  # keys per chunk of `p_register_order`: one k32 step of the fp8 wgmma


def p_register_order(x: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """x [..., N] with the last axis (keys) reordered within each chunk of 32 as the sm_90 fp8 P·V product's
    register operand holds P: position 16h + 4q + 2e + j takes key 16h + 8e + 2q + j (h, e, j in {0, 1}, q in
    0..3). Why: the scores' accumulator gives a thread the key pairs 2q, 8 + 2q (and 16 more) of each 32, the fp8
    A operand wants four consecutive k a register; with V's keys stored in this order the P tile is already in
    the operand's layout, so the forward converts P with no shuffle (FlashAttention-3 permutes V for the same
    reason). A product over keys is the same sum in another order. Layout only: no value changes.
    inverse: back to key order."""
    n = x.shape[-1]
    if n % P_ORDER_CHUNK:
        raise ValueError(f"p_register_order: the last axis ({n}) must be a multiple of {P_ORDER_CHUNK}")
    inner = (4, 2) if inverse else (2, 4)  # [h, q, e, j] back to [h, e, q, j], or the way there
    chunks = x.reshape(*x.shape[:-1], n // P_ORDER_CHUNK, 2, *inner, 2)
    return chunks.transpose(-3, -2).reshape(x.shape).contiguous()


# ---------------------------------------------------------------- mxfp8 (E4M3 + E8M0)


def mx_exponent(amax: torch.Tensor) -> torch.Tensor:
    """E8M0 code (uint8) of the smallest 2^e with ``amax / 2^e <= 448``, from fp32 amax.

    Exact bit arithmetic: amax = 1.m * 2^k gives e = k - 8, plus one when
    1.m > 1.75 (448 = 1.75 * 2^8). Zero and fp32-subnormal amax take the
    smallest code (2^-127); NaN/Inf amax take the NaN code 255.
    """
    bits = amax.float().view(torch.int32)
    biased = (bits >> 23) & 0xFF
    mantissa = bits & 0x7FFFFF
    e = biased - (E8M0_BIAS + 8) + (mantissa > 0x600000).to(torch.int32)
    e = torch.where(biased == 0, -E8M0_BIAS, e).clamp(-E8M0_BIAS, E8M0_BIAS)
    code = torch.where(biased == 0xFF, E8M0_NAN, e + E8M0_BIAS)
    return code.to(torch.uint8)


def e8m0_to_float(code: torch.Tensor, negate: bool = False) -> torch.Tensor:
    """fp32 2^(code-127) (or 2^(127-code) with `negate`), exact; code 255 -> NaN."""
    c = code.to(torch.int32)
    e = (E8M0_BIAS - c) if negate else (c - E8M0_BIAS)
    # Built from bits, not exp2, so it is exact; 2^-127 is the one fp32 subnormal.
    bits = torch.where(e == -E8M0_BIAS, torch.full_like(e, 0x400000), (e + E8M0_BIAS) << 23)
    return torch.where(c == E8M0_NAN, torch.nan, bits.view(torch.float32))


def quantize_mxfp8(x: torch.Tensor, block: int = MX_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP8 along the last dim.

    x: [..., N], N a multiple of `block`. Returns (x8 [..., N] float8_e4m3fn,
    scale_e8m0 [..., N // block] uint8, biased exponent). Elements are
    ``x * 2^-e`` (exact: a power of two) rounded to E4M3; by the choice of e
    no element saturates.
    """
    _check_last_dim(x, block, "mxfp8")
    xb = x.float().reshape(*x.shape[:-1], x.shape[-1] // block, block)
    code = mx_exponent(xb.abs().amax(dim=-1))
    x8 = _saturate_to_fp8(xb * e8m0_to_float(code, negate=True).unsqueeze(-1))
    return x8.reshape(x.shape), code


def dequantize_mxfp8(x8: torch.Tensor, scale_e8m0: torch.Tensor) -> torch.Tensor:
    """fp32 [..., N] from MXFP8 bytes and their [..., N // block] E8M0 codes."""
    block = x8.shape[-1] // scale_e8m0.shape[-1]
    xb = x8.float().reshape(*x8.shape[:-1], scale_e8m0.shape[-1], block)
    return (xb * e8m0_to_float(scale_e8m0).unsqueeze(-1)).reshape(x8.shape)


# ---------------------------------------------------------------- nvfp4 (E2M1 + E4M3 + fp32)


@dataclass
class NVFP4Tensor:
    """NVFP4 data for x [..., N]: value = E2M1(code) * (float(block_scale) * global_scale).

    codes: uint8 [..., N // 2], two E2M1 codes per byte, element 2i in the low
    nibble and 2i+1 in the high nibble (bit 3 of a code is the sign).
    block_scale: float8_e4m3fn [..., N // block]. global_scale: fp32,
    broadcastable to x[..., :1] (per tensor: all ones shape; per token: [..., 1]).
    """

    codes: torch.Tensor
    block_scale: torch.Tensor
    global_scale: torch.Tensor

    @property
    def shape(self) -> torch.Size:
        """Shape of the unpacked tensor."""
        return torch.Size((*self.codes.shape[:-1], 2 * self.codes.shape[-1]))


def nvfp4_global_scale(amax: torch.Tensor) -> torch.Tensor:
    """fp32 global scale ``max(amax, FP8_TINY) / (448 * 6)``."""
    return _div(amax.float().clamp_min(FP8_TINY), NVFP4_GLOBAL_DIVISOR)


def nvfp4_per_token_global_scale(x: torch.Tensor) -> torch.Tensor:
    """Causally safe global scale for activations: one per token, shape x.shape[:-1] + (1,)."""
    return nvfp4_global_scale(x.abs().amax(dim=-1, keepdim=True))


def nvfp4_noise(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Uniform [0, 1) fp32 draws, one per element of x, for stochastic rounding.

    Every implementation draws exactly this (same shape, same generator), so a
    stochastic quantization is reproducible bit for bit.
    """
    return torch.rand(x.shape, generator=generator, device=x.device, dtype=torch.float32)


def e2m1_codes(v: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
    """4-bit E2M1 codes (uint8, one per byte) of fp32 `v`, saturating at ±6.

    Round-to-nearest-even without `noise`; with `noise` (uniform [0, 1)),
    stochastic rounding: round up with probability (|v| - lo) / (hi - lo),
    unbiased below the saturation point. NaN gives code 0; the sign bit is set
    when v < 0. All arithmetic is exact (lo <= |v| <= 2 lo, Sterbenz).
    """
    a = v.abs()
    lo_code = sum((a >= t).long() for t in E2M1_VALUES[1:])
    values = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=v.device)
    steps = torch.tensor(_E2M1_STEPS, dtype=torch.float32, device=v.device)
    rest = a - values[lo_code]
    step = steps[lo_code]
    if noise is None:
        half = step * 0.5
        up = (rest > half) | ((rest == half) & (lo_code % 2 == 1))
    else:
        up = noise * step < rest
    code = lo_code + (up & (lo_code < 7)).long()
    return (code | ((v < 0).long() << 3)).to(torch.uint8)


def e2m1_to_float(codes: torch.Tensor) -> torch.Tensor:
    """fp32 values of 4-bit E2M1 codes (uint8, one per byte)."""
    c = codes.to(torch.int64)
    mag = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)[c & 7]
    return torch.where((c & 8) != 0, -mag, mag)


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """[..., N] 4-bit codes -> [..., N // 2] bytes, even element in the low nibble."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """[..., N // 2] bytes -> [..., N] 4-bit codes (inverse of :func:`pack_nibbles`)."""
    return torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2)


def nvfp4_block_scale(block_amax: torch.Tensor, global_scale: torch.Tensor) -> torch.Tensor:
    """E4M3 block scale ``sat(block_amax / 6 / global)``; NaN for non-finite block_amax."""
    bs = _div(block_amax.float(), E2M1_MAX) / global_scale
    return _saturate_to_fp8(torch.where(torch.isfinite(block_amax), bs, torch.nan))


def quantize_nvfp4(
    x: torch.Tensor,
    block: int = NVFP4_BLOCK,
    global_scale: torch.Tensor | None = None,
    stochastic: bool = False,
    generator: torch.Generator | None = None,
) -> NVFP4Tensor:
    """NVIDIA's two-level NVFP4 quantization of x [..., N] along the last dim.

    global_scale: fp32 broadcastable to x[..., :1]; None means the whole-tensor
    amax (fine for weights, NOT causally safe for activations: pass
    :func:`nvfp4_per_token_global_scale` there). Elements are
    ``x / (float(block_scale) * global)`` rounded to E2M1 (nearest-even, or
    stochastic with draws from :func:`nvfp4_noise` when `stochastic`); a zero
    block scale gives zero elements.
    """
    _check_last_dim(x, block, "nvfp4")
    if block % 2:
        raise ValueError(f"nvfp4: block size {block} must be even (two codes per byte)")
    xf = x.float()
    if global_scale is None:
        global_scale = nvfp4_global_scale(xf.abs().amax()).reshape((1,) * x.dim())
    global_scale = global_scale.float()
    xb = xf.reshape(*x.shape[:-1], x.shape[-1] // block, block)  # (..., N/block, block)
    block_scale = nvfp4_block_scale(xb.abs().amax(dim=-1), global_scale)
    denom = (block_scale.float() * global_scale).unsqueeze(-1)
    v = torch.where(denom == 0, 0.0, xb / denom)
    noise = nvfp4_noise(x, generator).reshape(xb.shape) if stochastic else None
    codes = e2m1_codes(v, noise).reshape(x.shape)
    return NVFP4Tensor(pack_nibbles(codes), block_scale, global_scale)


def quantize_nvfp4_per_token(
    x: torch.Tensor,
    block: int = NVFP4_BLOCK,
    stochastic: bool = False,
    generator: torch.Generator | None = None,
) -> NVFP4Tensor:
    """NVFP4 with the causally safe per-token global scale (global_scale [..., 1])."""
    return quantize_nvfp4(x, block, nvfp4_per_token_global_scale(x), stochastic, generator)


def dequantize_nvfp4(q: NVFP4Tensor) -> torch.Tensor:
    """fp32 [..., N] = E2M1(code) * (float(block_scale) * global_scale)."""
    vals = e2m1_to_float(unpack_nibbles(q.codes))
    n_blocks = q.block_scale.shape[-1]
    vb = vals.reshape(*vals.shape[:-1], n_blocks, vals.shape[-1] // n_blocks)
    denom = (q.block_scale.float() * q.global_scale.float()).unsqueeze(-1)
    return (vb * denom).reshape(vals.shape)


# ---------------------------------------------------------------- fake quantization


def fake_quantize(x: torch.Tensor, fmt: str, **kw) -> torch.Tensor:
    """Quantize then dequantize x [..., D] along its last dim, returned in x's dtype.

    fmt: "bf16" (identity), "fp8" (per-token scale), "mxfp8" (kw: block),
    "nvfp4" (per-token global scale; kw: block, stochastic, generator).
    Every choice is causally safe (no scale spans tokens).
    """
    if fmt == "bf16":
        return x
    if fmt == "fp8":
        x8, scale = quantize_fp8_per_token(x, **kw)
        out = dequantize_fp8(x8, scale)
    elif fmt == "mxfp8":
        out = dequantize_mxfp8(*quantize_mxfp8(x, **kw))
    elif fmt == "nvfp4":
        out = dequantize_nvfp4(quantize_nvfp4_per_token(x, **kw))
    else:
        raise ValueError(f"unknown quantization format {fmt!r}; allowed: {', '.join(_FORMATS)}")
    return out.to(x.dtype)
