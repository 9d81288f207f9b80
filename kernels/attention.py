"""`flamia_attention`: the public FLAMIA attention op, its input checks and its dispatch.

Dispatch, by spec and device (docs/kernels.md):

- spec ``bf16``: torch SDPA (cuDNN on the H200; any float dtype, any device, GQA via
  enable_gqa), no Triton; the cheap path the training stack also runs on CPU.
- quantized spec, CUDA tensors: the Triton forward/backward kernels (`attention_fwd`,
  `attention_bwd`). MXFP8 / NVFP4 are *emulated* there (exact format values in bf16
  products): the format's numerics and memory, not its FLOP rate.
- quantized spec, CPU tensors: the same Triton kernels under ``TRITON_INTERPRET=1``
  (decided when the kernel modules are imported: set it before importing flamia_kernels),
  else `reference.attention`, the same math in PyTorch.

``doc_ids`` [B, S] (document masking, `document`): every path takes it; the bf16 spec runs
SDPA with a dense boolean mask, the kernels and the reference AND "same document" into the mask.

``safeguards=False`` is LEAKY on purpose: Q and K/V get token-block scales and the
diagonal tile's V-scale max spans future keys. It exists only so that the causal-safety
tests can show they catch a leak; never train with it.
"""
from __future__ import annotations

import math
from dataclasses import replace

import torch

from . import quantize as QZ
from . import reference
from ._triton_env import can_run_triton
from .attention_operands import (
    Operand,
    attach_off_diagonal,
    backward_delta,
    prepare_forward,
    quantize_operand,
    quantize_output,
)
from .document import check_doc_ids, doc_tables
from .spec import SEQ_BLOCK, SUPPORTED_HEAD_DIMS, AttentionSpec

_SDPA_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_inputs(q, k, v, spec: AttentionSpec) -> None:
    """Raise TypeError / ValueError for inputs the chosen path cannot take, before any kernel runs."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"flamia_attention: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"flamia_attention: {name} must be [B, H, S, D] (rank 4), got {tuple(t.shape)}")
        if t.device != q.device:
            raise ValueError(f"flamia_attention: {name} is on {t.device} but q is on {q.device}")
        allowed = _SDPA_DTYPES if spec.is_bf16 else (torch.bfloat16,)
        if t.dtype not in allowed:
            raise TypeError(
                f"flamia_attention: {name}.dtype = {t.dtype} is not supported by spec '{spec.name}'; "
                f"allowed: {', '.join(str(d) for d in allowed)}"
            )
    (b, hq, seq, d), (bk, hkv, seqk, dk) = q.shape, k.shape
    if v.shape != k.shape:
        raise ValueError(f"flamia_attention: v shape {tuple(v.shape)} must equal k shape {tuple(k.shape)}")
    if (bk, seqk, dk) != (b, seq, d):
        raise ValueError(
            f"flamia_attention: k/v shape {tuple(k.shape)} must match q {tuple(q.shape)} in B, S and D"
        )
    if hkv == 0 or hq % hkv:
        raise ValueError(f"flamia_attention: KV heads ({hkv}) must divide query heads ({hq}) for GQA")
    if spec.is_bf16:
        return
    if d not in SUPPORTED_HEAD_DIMS:
        raise ValueError(
            f"flamia_attention: head_dim {d} is not supported by spec '{spec.name}'; "
            f"allowed: {', '.join(map(str, SUPPORTED_HEAD_DIMS))}"
        )
    if seq == 0 or seq % SEQ_BLOCK:
        raise ValueError(
            f"flamia_attention: sequence length {seq} must be a positive multiple of SEQ_BLOCK = {SEQ_BLOCK} "
            f"for spec '{spec.name}'"
        )


class _FlamiaAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, spec: AttentionSpec, causal: bool, safeguards: bool, doc_ids, needs_grad: bool):
        from . import attention_fwd

        sm_scale = 1.0 / math.sqrt(q.shape[-1])
        has_doc = doc_ids is not None
        # what the launch decides before the pre-pass, read once: whether the forward kernel quantizes Q itself
        # (fp8 qk, per-token Q only), V's copy's order, the dependent launch
        plan = attention_fwd.plan(q, spec, causal, safeguards, has_doc)
        fuse_q = plan.fuse_q
        ops = prepare_forward(q, k, v, spec, safeguards, QZ, SEQ_BLOCK, v_transposed=True,
                              off_diagonal=not has_doc, mx_parts=attention_fwd.native_block_scaled(q),
                              quantize_q=not fuse_q, v_p_order=plan.v_p_order,
                              launch_dependents=plan.launch_dependents)
        if fuse_q:
            ops.q = attention_fwd.fused_q_operand(q)
        # O's fp8 copy only feeds the backward's delta: a forward nothing will differentiate (no_grad,
        # inference) skips it and saves nothing, as SDPA skips its logsumexp there
        save_o8 = needs_grad and spec.do != "bf16"
        doc = None if doc_ids is None else doc_tables(doc_ids)
        # Q's bytes too are the backward's: a forward that fuses Q's quantization writes them only for it
        o, lse2, moff, o8, o_scale = attention_fwd.forward(ops.q, ops.k, ops.v, spec, causal, safeguards,
                                                           sm_scale, SEQ_BLOCK, save_o8, doc=doc,
                                                           q_raw=q if fuse_q else None, save_q=needs_grad)
        if not needs_grad:
            return o
        o_saved = Operand(o8, o_scale) if save_o8 else quantize_output(o, spec.do, QZ)
        # The per-token bytes only: the backward re-derives the off-diagonal copies from them. K's copy's block
        # scales (S / 128 floats a head) too, so that the ws dK/dV kernel can re-quantize the copy from the rows it
        # holds (launch option fold_k) without a pass over K for the amax.
        kbs = ops.k.off.scale if safeguards and ops.k.off is not None and doc_ids is None else None
        # and V's (launch option fold_k with attention_bwd.FOLD_V: V's copy re-quantized in that kernel as well, over
        # the fp8 dS buffer)
        vbs = ops.v.off.scale if safeguards and ops.v.off is not None and doc_ids is None else None
        ctx.save_for_backward(ops.q.vals, ops.q.scale, ops.k.vals, ops.k.scale, ops.v.vals_t, ops.v.scale,
                              o_saved.vals, o_saved.scale, *(doc or (None,) * 3), kbs, vbs, lse2, moff)
        ctx.cfg = (spec, causal, safeguards, sm_scale)
        return o

    @staticmethod
    def backward(ctx, grad_o):
        from . import attention_bwd

        qv, qs, kv, ks, vtv, vs, ov, os_, *doc, kbs, vbs, lse2, moff = ctx.saved_tensors
        spec, causal, safeguards, sm_scale = ctx.cfg
        k_op, v_op = Operand(kv, ks), Operand(vtv, vs, vals_t=vtv)
        if doc[0] is None:  # the off-diagonal copies, re-derived as the forward made them, deferred: on the
            # fast path (`pre`) the copies pass re-quantizes them where it reads K's and V's bytes anyway
            attach_off_diagonal(k_op, v_op, spec, safeguards, QZ, SEQ_BLOCK, v_transposed=True, defer_v=True,
                                defer_k=True)
            if kbs is not None and k_op.off is not None and k_op.off.deferred:  # still deferred: the scales known
                k_op.off = replace(k_op.off, scale=kbs)
            if vbs is not None and v_op.off is not None and v_op.off.deferred:
                v_op.off = replace(v_op.off, scale=vbs)
        do_l1 = None
        if spec.do == "fp8":  # dO's bytes and delta in one pass over dO and the saved fp8 O (and, for the FP8
            # dV product, the bytes K-major; for the FP8 dQ product, ρ's ‖dO8_i‖₁)
            do8, sdo, delta, *extra = QZ.quantize_fp8_per_token_with_delta(grad_o, ov, os_, transposed=spec.fp8_dv,
                                                                           row_l1=spec.dsk == "fp8")
            do = Operand(do8, sdo[..., 0], extra[0] if spec.fp8_dv else None)
            do_l1 = extra[-1] if spec.dsk == "fp8" else None
        else:
            do = quantize_operand(grad_o.contiguous(), spec.do, QZ)
            delta = backward_delta(do, Operand(ov, os_))
        dq, dk, dv = attention_bwd.backward(Operand(qv, qs), k_op, v_op, do, lse2, moff, delta, spec, causal,
                                            safeguards, sm_scale, SEQ_BLOCK,
                                            doc=None if doc[0] is None else tuple(doc), do_l1=do_l1)
        return dq, dk, dv, None, None, None, None, None


def saved_bytes(q, k, v, spec="fp8", causal: bool = True, doc_ids=None) -> int:
    """Bytes the quantized forward keeps alive for the backward (0 for the bf16 spec: SDPA's own): the storages
    behind its saved tensors, each counted once — a saved view of a larger allocation holds all of it."""
    spec = AttentionSpec.parse(spec)
    if spec.is_bf16:
        return 0
    with torch.enable_grad():
        q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
        o = flamia_attention(q, k, v, spec, causal, doc_ids=doc_ids)
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in o.grad_fn.saved_tensors
                if t is not None}
    return sum(storages.values())


def flamia_attention(q, k, v, spec="bf16", causal: bool = True, safeguards: bool = True,
                     doc_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Causal FLAMIA attention.

    q [B, Hq, S, D], k, v [B, Hkv, S, D] with Hkv dividing Hq (GQA), same device.
    Quantized specs take bf16 with D in SUPPORTED_HEAD_DIMS and S a multiple of SEQ_BLOCK;
    the bf16 spec (SDPA) takes bf16/fp16/fp32 of any shape SDPA takes. Returns O
    [B, Hq, S, D] in q's dtype, differentiable in q, k, v. `spec`: an AttentionSpec, a
    preset (bf16, fp8, fp8-bf16dq, mxfp8, nvfp4, nvfp4-fp8) or "qk=fp8,pv=fp8,do=fp8,ds=bf16" (and ",dsk=fp8").
    doc_ids: None, or int32/int64 [B, S] non-decreasing along each row (the document of each
    token of a packed row): query i then sees key j only if doc_ids[b, j] == doc_ids[b, i] (and
    j <= i when causal). Checking that the ids never decrease reads one bool back (a host sync).
    safeguards=False is deliberately leaky (module docstring).
    """
    spec = AttentionSpec.parse(spec)
    check_inputs(q, k, v, spec)
    if doc_ids is not None:
        check_doc_ids(doc_ids, q)
    if spec.is_bf16:
        return reference._sdpa(q, k, v, causal, doc_ids)
    if not can_run_triton(q):
        return reference.attention(q, k, v, spec, causal, safeguards, doc_ids)
    q, k, v = (t.contiguous() for t in (q, k, v))
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if needs_grad:  # a bad FLAMIA_DS_OUT_BYTES is refused before the forward runs, not after it
        from . import attention_bwd

        attention_bwd.ds_out_budget()
    return _FlamiaAttention.apply(q, k, v, spec, causal, safeguards, doc_ids, needs_grad)


def attention_lse(q, k, v, spec="fp8", causal: bool = True, safeguards: bool = True, doc_ids=None):
    """(O bf16, LSE fp32 [B, Hq, S]) of the Triton forward, for the causal-safety tests."""
    from . import attention_fwd

    spec = AttentionSpec.parse(spec)
    check_inputs(q, k, v, spec)
    if doc_ids is not None:
        check_doc_ids(doc_ids, q)
    plan = attention_fwd.plan(q, spec, causal, safeguards, doc_ids is not None)
    ops = prepare_forward(q.contiguous(), k.contiguous(), v.contiguous(), spec, safeguards, QZ, SEQ_BLOCK,
                          v_transposed=True, off_diagonal=doc_ids is None,
                          mx_parts=attention_fwd.native_block_scaled(q), v_p_order=plan.v_p_order)
    o, lse2, _, _, _ = attention_fwd.forward(ops.q, ops.k, ops.v, spec, causal, safeguards,
                                          1.0 / math.sqrt(q.shape[-1]), SEQ_BLOCK, False,
                                          doc=None if doc_ids is None else doc_tables(doc_ids))
    return o, reference.lse_from_saved(lse2)
