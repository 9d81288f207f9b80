"""Quantized attention operands: every tensor a FLAMIA product reads, as (values, per-token scale).

One pre-pass turns Q, K, V (forward) and dO, O (backward) into `Operand`s that
both the Triton kernels and `reference.attention` consume, so the two paths see
the same bytes and scales by construction (the Triton pre-pass in `quantize`
is bit-identical to `formats`, which the reference uses).

Representation, for every format: ``x ≈ vals * scale[..., None]`` where

- ``vals`` [..., S, D] holds the format's values without the per-token factor:
  fp8 bytes (``fp8``, the tensor-core operand), or bf16 numbers that are the
  format's dequantized values *exactly* (MXFP8: E4M3 × 2^e; NVFP4: E2M1 × E4M3
  block scale), or the bf16 input itself (``bf16``);
- ``scale`` [..., S] fp32 is one factor per token: the fp8 scale, the NVFP4
  global scale, or 1. A token-block scale (the leaky variant) is stored the
  same way, constant over each block, so the kernels need no second layout.

Causal safety (FLAMIA.md): with safeguards on, every scale here is per token,
so no token's quantization depends on another token. ``block`` (safeguards
off) shares one scale over SEQ_BLOCK tokens: leaky, used only to prove that
the tests catch a leak.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from . import formats as F


@dataclass
class OffDiagonal:
    """Token-block fp8 copy of a key-side operand, read only off the causal diagonal.

    ``vals`` fp8 [..., S, D] (or [..., D, S] when ``transposed``), ``scale`` fp32
    [..., S // block]: one scale per kernel tile, so the kernels fold it as a scalar.
    Both None: ``deferred`` (`attach_off_diagonal(defer_v=True, defer_k=True)`), the copy not computed
    yet; `attention_bwd.backward` either re-quantizes it as rows within its `pre` copies (the only form
    that path reads) or, on any other path, computes it here (`off_diagonal`).
    ``p_order`` (transposed V only): the keys of ``vals`` stored in `formats.p_register_order`, the order the
    sm_90 forward's fp8 P·V operand holds P in (`prepare_forward(v_p_order=True)`); `rows` gives them back in
    key order.
    """

    vals: torch.Tensor | None
    scale: torch.Tensor | None
    block: int
    transposed: bool = False
    p_order: bool = False

    @property
    def deferred(self) -> bool:
        return self.vals is None

    def per_token_scale(self) -> torch.Tensor:
        """[..., S]: each tile's scale repeated over its tokens."""
        return self.scale.repeat_interleave(self.block, dim=-1)

    def rows(self) -> torch.Tensor:
        """The bytes as [..., S, D], keys in order."""
        vals = F.p_register_order(self.vals, inverse=True) if self.p_order else self.vals
        return vals.transpose(-1, -2) if self.transposed else vals

    def dequant(self) -> torch.Tensor:
        """fp32 [..., S, D] = bytes * their tile's scale."""
        return self.rows().float() * self.per_token_scale()[..., None]


@dataclass
class Operand:
    """One quantized operand: ``vals`` [..., S, D] (fp8 or bf16) and ``scale`` [..., S] fp32."""

    vals: torch.Tensor
    scale: torch.Tensor
    vals_t: torch.Tensor | None = None  # the same values [..., D, S] when a kernel reads them K-major
    off: OffDiagonal | None = None  # key side, fp8: the token-block copy for off-diagonal tiles
    # mxfp8 kept as the format's own parts, (E4M3 bytes [..., S, D], E8M0 codes [..., S, D // 32]),
    # for a block-scaled product (`tl.dot_scaled`; sm_100+); vals hold their exact dequantized values
    mx: tuple[torch.Tensor, torch.Tensor] | None = None

    def dequant(self) -> torch.Tensor:
        """fp32 [..., S, D] = vals * scale."""
        return self.vals.float() * self.scale[..., None]

    def nbytes(self) -> int:
        """Bytes held (values + scales), as saved for the backward."""
        return self.vals.numel() * self.vals.element_size() + self.scale.numel() * self.scale.element_size()


def _per_token(scale: torch.Tensor, seq: int, block: int | None) -> torch.Tensor:
    """[..., S, 1] (per token) or [..., S // block, 1, 1] (per block) scale -> [..., S] fp32."""
    if block is None:
        return scale[..., 0].float().contiguous()
    lead = scale.shape[:-3]
    per_block = scale.reshape(*lead, seq // block, 1)
    return per_block.expand(*lead, seq // block, block).reshape(*lead, seq).contiguous()


def _block_amax(x: torch.Tensor, block: int) -> torch.Tensor:
    """amax over each block of `block` tokens × D, repeated per token: [..., S, 1] fp32."""
    seq = x.shape[-2]
    xb = F._token_block_view(x.float(), block)
    amax = xb.abs().amax(dim=(-2, -1), keepdim=True)  # (..., S/block, 1, 1)
    return amax.expand(*amax.shape[:-2], block, 1).reshape(*x.shape[:-2], seq, 1)


def quantize_operand(x: torch.Tensor, fmt: str, impl, block: int | None = None,
                     transposed: bool = False, mx_parts: bool = False) -> Operand:
    """Quantize x [..., S, D] (bf16) to `fmt` with `impl` (module `formats` or `quantize`).

    block None: per-token scales (causally safe). block = n: one scale over n tokens
    (leaky unless only ever read off the causal diagonal). transposed: also fill `vals_t`
    (written in the same pass by `quantize`'s per-token fp8 kernel). mx_parts: mxfp8 with
    per-token scales also keeps its bytes and E8M0 codes in `mx` (the block-scaled product).
    """
    seq = x.shape[-2]
    if transposed:
        if fmt == "fp8" and block is None and impl is not F:
            x8, scale, x8t = impl.quantize_fp8_per_token(x, transposed=True)
            return Operand(x8, _per_token(scale, seq, None), x8t)
        op = quantize_operand(x, fmt, impl, block)
        op.vals_t = op.vals.transpose(-1, -2).contiguous()
        return op
    if fmt == "bf16":
        return Operand(x.to(torch.bfloat16).contiguous(), torch.ones(x.shape[:-1], device=x.device))
    if fmt == "fp8":
        if block is None:
            x8, scale = impl.quantize_fp8_per_token(x)
        else:
            x8, scale = impl.quantize_fp8_token_blocks(x, block)
        return Operand(x8, _per_token(scale, seq, block))
    if fmt == "mxfp8":
        sb = None if block is None else F.fp8_scale(_block_amax(x, block))  # leaky pre-scale
        xs = x if sb is None else x.float() / sb
        parts = impl.quantize_mxfp8(xs)
        vals = F.dequantize_mxfp8(*parts).to(torch.bfloat16)  # exact: E4M3 × 2^e
        scale = torch.ones(x.shape[:-1], device=x.device) if sb is None else sb[..., 0].contiguous()
        return Operand(vals, scale, mx=parts if mx_parts and sb is None else None)
    if fmt == "nvfp4":
        if block is None:
            glob = F.nvfp4_per_token_global_scale(x)
        else:
            glob = F.nvfp4_global_scale(_block_amax(x, block))
        q = impl.quantize_nvfp4(x, F.NVFP4_BLOCK, glob)
        unit = torch.ones_like(q.global_scale)
        # E2M1 × E4M3 block scale, exact in bf16; the fp32 global stays the per-token factor.
        vals = F.dequantize_nvfp4(F.NVFP4Tensor(q.codes, q.block_scale, unit)).to(torch.bfloat16)
        return Operand(vals, glob[..., 0].float().contiguous())
    raise ValueError(f"unknown format {fmt!r}; allowed: {', '.join(F._FORMATS)}")


def off_diagonal(op: Operand, block: int, impl, leaky: bool, transposed: bool = False) -> OffDiagonal:
    """The token-block copy of a per-token fp8 key-side operand (K in QKᵀ, V in P·V).

    Re-quantized from the per-token bytes (`formats.requantize_fp8_token_blocks`), so the
    backward derives the same bytes from what the forward saved. ``leaky`` (safeguards off):
    the operand already has token-block scales, and the copy is the operand itself.
    ``transposed``: built from and laid out as ``vals_t`` [..., D, S].
    """
    src = op.vals_t if transposed else op.vals
    seq = op.scale.shape[-1]
    if leaky:
        return OffDiagonal(src, op.scale[..., ::block].contiguous(), block, transposed)
    if impl is F:
        rows, scale = F.requantize_fp8_token_blocks(op.vals, op.scale[..., None], block)
        vals = rows.transpose(-1, -2).contiguous() if transposed else rows
    else:
        vals, scale = impl.requantize_fp8_token_blocks(src, op.scale, block, transposed=transposed)
    return OffDiagonal(vals, scale.reshape(*op.scale.shape[:-1], seq // block), block, transposed)


@dataclass
class ForwardOperands:
    """Q, K, V as the forward quantized them: the bytes the backward must reuse."""

    q: Operand | None  # None until the forward kernel fills it (prepare_forward(quantize_q=False))
    k: Operand
    v: Operand


def attach_off_diagonal(k: Operand, v: Operand, spec, safeguards: bool, impl, block: int,
                        v_transposed: bool, defer_v: bool = False, defer_k: bool = False) -> None:
    """Give the fp8 key-side operands their token-block copies (`off_diagonal`), in place.
    defer_v / defer_k (the autograd backward, safeguards on): V's / K's copy is left ``deferred`` for
    `attention_bwd.backward` (see `OffDiagonal`); a leaky copy is the operand itself and never deferred."""
    if spec.qk == "fp8":
        if defer_k and safeguards:
            k.off = OffDiagonal(None, None, block)
        else:
            k.off = off_diagonal(k, block, impl, not safeguards)
    if spec.pv == "fp8":
        if defer_v and safeguards:
            v.off = OffDiagonal(None, None, block, v_transposed)
        else:
            v.off = off_diagonal(v, block, impl, not safeguards, transposed=v_transposed)


def deferred_with_scales(op: Operand) -> bool:
    """op's token-block copy is deferred but its block scales are known (K as the autograd backward gets it: the
    forward saves them), so a kernel can re-quantize the copy itself (launch option fold_k)."""
    return op.off is not None and op.off.deferred and op.off.scale is not None


def materialize_off_diagonal(op: Operand, impl) -> Operand:
    """op itself, or where its copy is ``deferred`` a new Operand with the copy computed (`off_diagonal`)."""
    if op.off is None or not op.off.deferred:
        return op
    return replace(op, off=off_diagonal(op, op.off.block, impl, False, op.off.transposed))


def _key_side_operand(x8, scale, xb8, bscale, block: int, transposed: bool, p_order: bool = False) -> Operand:
    """The Operand of a fused key-side pass's outputs (`quantize.quantize_fp8_key_side`)."""
    vals = x8.transpose(-1, -2) if transposed else x8
    return Operand(vals, scale, x8 if transposed else None, OffDiagonal(xb8, bscale, block, transposed, p_order))


def _key_side(x, fmt: str, impl, leak: int | None, block: int, transposed: bool, off: bool) -> Operand:
    """K or V quantized; fp8 with `off` also carries its off-diagonal copy (one fused pass in
    `quantize`, else `off_diagonal` after the per-token quantizer: the same bytes)."""
    if off and fmt == "fp8" and leak is None and impl is not F:
        return _key_side_operand(*impl.quantize_fp8_key_side(x, block, transposed), block, transposed)
    op = quantize_operand(x, fmt, impl, leak, transposed=transposed)
    if off and fmt == "fp8":
        op.off = off_diagonal(op, block, impl, leak is not None, transposed)
    return op


def prepare_forward(q, k, v, spec, safeguards: bool, impl, block: int, v_transposed: bool = False,
                    off_diagonal: bool = True, mx_parts: bool = False, quantize_q: bool = True,
                    v_p_order: bool = False, launch_dependents: bool = False):
    """Quantize Q, K (spec.qk) and V (spec.pv), V also as Vᵀ if asked (the kernels' layout);
    fp8 K and V also get their off-diagonal token-block copies unless `off_diagonal` is False
    (document masking: a tile's shared scale would carry one document's values into another's
    attention). Safeguards off: token-block scales everywhere (leaky). mx_parts: mxfp8 Q and K
    also keep their bytes and E8M0 codes (`Operand.mx`) for the forward's block-scaled QKᵀ.
    quantize_q False: Q is left to the forward kernel (`attention_fwd.forward(q_raw=...)`); q is None.
    v_p_order: V's token-block copy (fp8, transposed, safeguards on) with its keys in `formats.p_register_order`
    (`OffDiagonal.p_order`), which the forward kernels read with P in the same order; elsewhere ignored.
    launch_dependents: K's and V's one-launch pass lets the next kernel start early where that kernel is a
    programmatic dependent launch (`quantize.quantize_fp8_key_sides`; the sm_90 forward's launch option pdl)."""
    leak = None if safeguards else block
    v_p_order = v_p_order and off_diagonal and v_transposed and leak is None and spec.pv == "fp8"
    if mx_parts and spec.qk == "mxfp8":
        return ForwardOperands(
            quantize_operand(q, spec.qk, impl, leak, mx_parts=True),
            quantize_operand(k, spec.qk, impl, leak, mx_parts=True),
            _key_side(v, spec.pv, impl, leak, block, v_transposed, off_diagonal),
        )
    q_op = quantize_operand(q, spec.qk, impl, leak) if quantize_q else None
    if (off_diagonal and v_transposed and leak is None and spec.qk == spec.pv == "fp8" and impl is not F
            and k.shape == v.shape):  # K's and Vᵀ's passes in one launch
        k_parts, v_parts = impl.quantize_fp8_key_sides(k, v, block, p_order=v_p_order,
                                                       launch_dependents=launch_dependents)
        return ForwardOperands(q_op, _key_side_operand(*k_parts, block, False),
                               _key_side_operand(*v_parts, block, True, v_p_order))
    v_op = _key_side(v, spec.pv, impl, leak, block, v_transposed, off_diagonal)
    if v_p_order:
        v_op.off = replace(v_op.off, vals=F.p_register_order(v_op.off.vals), p_order=True)
    return ForwardOperands(q_op, _key_side(k, spec.qk, impl, leak, block, False, off_diagonal), v_op)


def quantize_output(o: torch.Tensor, do_fmt: str, impl) -> Operand:
    """O as saved for the backward, where its only use is delta = rowsum(dO ∘ O).

    Stored in dO's precision class: bf16 when dO stays bf16 (the gradient then equals
    autograd through the straight-through forward up to bf16 rounding), else per-token
    fp8 (half the bytes; its ~3% element error moves delta, and so dQ/dK, by ~1%, below
    the error dO's own quantization brings).
    """
    return quantize_operand(o, "bf16" if do_fmt == "bf16" else "fp8", impl)


def backward_delta(do: Operand, o: Operand) -> torch.Tensor:
    """delta [..., S] fp32 = rowsum(deq(dO) ∘ deq(O)): the softmax-Jacobian row term."""
    return (do.dequant() * o.dequant()).sum(-1)
