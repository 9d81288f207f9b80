"""The FLAMIA backward's per-row copies (launch option `pre`, the fp8 fast path's default).

Every dK/dV program reads every later query sub-tile and every dQ program every earlier key
sub-tile, so whatever a sub-tile converts is converted S / 64 times over. These two passes do it
once per row, before the kernels run:

    QB   = bf16(Q8)                          the dK product's B operand (exact: E4M3 ⊂ bf16)
    DOB  = bf16(dO8 · s_dO · (1/256) / l)     the dV product's B operand off the diagonal, where P
                                             carries no V scale (V has its token-block copy)
    KBF  = bf16(K8), KBBF = bf16(KB8)         the dQ product's B operand, per-token / token-block
    VR   = V8 rows, VBR = VB8 rows            dP = dO·Vᵀ's B operand: an FP8 wgmma needs it K-major
                                             (D contiguous), the forward stores Vᵀ

The values are the ones the kernels computed per tile (DOB through the same jit expression,
`scaled_do`), so the gradients are bit-identical with and without them. On the H200 at S = 8k,
B×H = 64 the per-tile conversions they replace cost the dQ kernel a third of its time.
"""
from __future__ import annotations

import torch

from ._triton_env import HAS_TRITON, INTERPRET

if HAS_TRITON:
    import triton
    import triton.language as tl

    from .attention_quant import to_bf16

    @triton.jit
    def row_stats(LSE2, MOFF, DELTA, DO, DOS, bh, offs_m, offs_d, S, D: tl.constexpr):
        """Per query row of one tile: M, 1/l (reference.unpack_stats), delta, dO values and scale."""
        lse2 = tl.load(LSE2 + bh * S + offs_m)
        m = tl.floor(lse2) - tl.load(MOFF + bh * S + offs_m).to(tl.float32)
        linv = tl.exp2(m - lse2)
        delta = tl.load(DELTA + bh * S + offs_m)
        do = tl.load(DO + bh * S * D + offs_m[:, None] * D + offs_d[None, :])
        sdo = tl.load(DOS + bh * S + offs_m)
        return m, linv, delta, do, sdo

    @triton.jit
    def scaled_do(do, w, INTERP: tl.constexpr):
        """The dV product's B operand: bf16(dO · w) per row, w = r·prs·s_dO / l (P's dequantization,
        dO's scale folded), one expression for the dK/dV kernel and `_query_copies_kernel`."""
        return to_bf16(do.to(tl.float32) * w[:, None], INTERP)

    @triton.jit
    def _query_copies_kernel(Q, QB, DO, DOS, LSE2, MOFF, DELTA, DOB, S, D: tl.constexpr, BR: tl.constexpr,
                             SCALED_DO: tl.constexpr, INTERP: tl.constexpr):
        """QB and (SCALED_DO) DOB for BR query rows of one head."""
        bh = tl.program_id(1).to(tl.int64)
        offs_m = tl.program_id(0) * BR + tl.arange(0, BR)
        offs_d = tl.arange(0, D)
        rows = bh * S * D + offs_m[:, None] * D + offs_d[None, :]
        tl.store(QB + rows, tl.load(Q + rows).to(tl.bfloat16))
        if SCALED_DO:  # r = 1 and P in fp8 (prs = 1/256), in `_kv_tile`'s order: ((r·prs)·s_dO)·(1/l)
            m, linv, delta, do, sdo = row_stats(LSE2, MOFF, DELTA, DO, DOS, bh, offs_m, offs_d, S, D)
            w = tl.full([BR], 1.0, tl.float32) * tl.full([BR], 1.0 / 256.0, tl.float32) * sdo * linv
            tl.store(DOB + rows, scaled_do(do, w, INTERP))

    @triton.jit
    def _key_copies_kernel(K, KB, VT, VBT, KBF, KBBF, VR, VBR, S, D: tl.constexpr, BR: tl.constexpr,
                           K_OFF: tl.constexpr, V_OFF: tl.constexpr):
        """KBF, VR and (K_OFF / V_OFF) the token-block copies' KBBF, VBR for BR keys of one K/V head.
        V's bytes move as uint8: a transpose, no arithmetic."""
        bh = tl.program_id(1).to(tl.int64)
        offs_n = tl.program_id(0) * BR + tl.arange(0, BR)
        offs_d = tl.arange(0, D)
        rows = bh * S * D + offs_n[:, None] * D + offs_d[None, :]
        rows_t = bh * S * D + offs_d[:, None] * S + offs_n[None, :]
        tl.store(KBF + rows, tl.load(K + rows).to(tl.bfloat16))
        tl.store(VR + rows, tl.trans(tl.load(VT + rows_t)))
        if K_OFF:
            tl.store(KBBF + rows, tl.load(KB + rows).to(tl.bfloat16))
        if V_OFF:
            tl.store(VBR + rows, tl.trans(tl.load(VBT + rows_t)))


def pre_eligible(q, k, v, do, spec) -> bool:
    """The copies serve FP8 Q, K, V and dO bytes with P in fp8 and dS in bf16."""
    fp8 = torch.float8_e4m3fn
    return (spec.pv == "fp8" and spec.ds == "bf16" and q.vals.dtype == fp8 and k.vals.dtype == fp8
            and v.vals_t.dtype == fp8 and do.vals.dtype == fp8)


def _rows_per_program(seq: int) -> int:
    return next(r for r in (128, 64, 32, 16, 8, 4, 2, 1) if seq % r == 0)


def bf16_copies(q, k, v, do, lse2, moff, delta):
    """(QB, DOB, KBF, KBBF, VR, VBR) for the backward kernels (see the module docstring). Operands
    as `attention_bwd.backward` takes them; DOB is None without V's off-diagonal copy (P then carries
    V's scale on every tile), KBBF / VBR are KBF / VR without the token-block copies."""
    b, hq, seq, d = q.vals.shape
    hkv = k.vals.shape[1]
    dev = q.vals.device
    rows = _rows_per_program(seq)
    warps = 4 if INTERPRET else 8
    qb = torch.empty(b, hq, seq, d, dtype=torch.bfloat16, device=dev)
    dob = torch.empty_like(qb) if v.off is not None else None
    _query_copies_kernel[(seq // rows, b * hq)](q.vals, qb, do.vals, do.scale, lse2, moff, delta,
                                                dob if dob is not None else qb, seq, D=d, BR=rows,
                                                SCALED_DO=dob is not None, INTERP=INTERPRET, num_warps=warps)
    kbf = torch.empty(b, hkv, seq, d, dtype=torch.bfloat16, device=dev)
    kbbf = torch.empty_like(kbf) if k.off is not None else kbf
    vr = torch.empty(b, hkv, seq, d, dtype=v.vals_t.dtype, device=dev)
    vbr = torch.empty_like(vr) if v.off is not None else vr
    vt_bytes = v.vals_t.view(torch.uint8)
    _key_copies_kernel[(seq // rows, b * hkv)](
        k.vals, k.off.vals if k.off is not None else k.vals, vt_bytes,
        v.off.vals.view(torch.uint8) if v.off is not None else vt_bytes, kbf, kbbf, vr.view(torch.uint8),
        vbr.view(torch.uint8), seq, D=d, BR=rows, K_OFF=k.off is not None, V_OFF=v.off is not None,
        num_warps=warps)
    return qb, dob, kbf, kbbf, vr, vbr
