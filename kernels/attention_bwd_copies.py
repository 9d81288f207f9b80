"""The FLAMIA backward's per-row copies (launch option `pre`, the fp8 fast path's default).

Every dK/dV program reads every later query sub-tile and every dQ program every earlier key
sub-tile, so whatever a sub-tile converts is converted S / 64 times over. These two passes do it
once per row, before the kernels run:

    QB   = bf16(Q8)                          the dK product's B operand (exact: E4M3 ⊂ bf16)
    KBF  = bf16(K8), KBBF = bf16(KB8)         the dQ product's B operand, per-token / token-block
    VR   = V8 rows, VBR = VB8 rows            dP = dO·Vᵀ's B operand: an FP8 wgmma needs it K-major
                                             (D contiguous), the forward stores Vᵀ

and, for the Gluon dK/dV kernel, each query's statistics (`query_stats`). With launch option fold_k (the fast
path's default) the ws dK/dV kernel makes KBF and KBBF itself — bf16 rows, or, where `attention_bwd.FOLD_K_T` is set
(the default), K-major E4M3 bytes for the FP8 dQ product — and K's half is not run; with `attention_bwd.FOLD_V`
(over the fp8 dS buffer by default, V's block scales saved) it makes V's rows and copy too, and no key copies launch
runs at all. The dV product needs no copy
here: it is an FP8 product on this path (`AttentionSpec.fp8_dv`) whose B operand, dO's bytes K-major,
dO's pre-pass writes (`quantize.quantize_fp8_per_token_with_delta(transposed=True)`); until session 16 it
was bf16 against DOB = bf16(dO8 · s_dO · (1/256) / l) from this pass. The values are the ones the
kernels would convert per tile, so the gradients are bit-identical with and without the copies. On the
H200 at S = 8k, B×H = 64 the per-tile conversions they replace cost the dQ kernel a third of its time.

V's token-block copy: on this path every kernel reads it as rows only (VBR: the dQ kernel's dP, the
Gluon dK/dV kernel's TMA, the Triton dK/dV kernel's `PRE` loads) plus its block scales. The autograd
backward therefore leaves it ``deferred`` (`attention_operands.OffDiagonal`) and `_key_copies_kernel`
re-quantizes VBR and the scales from Vᵀ's per-token bytes in the same read that transposes them into
VR, where before `quantize._fp8_requant_blocks_kernel` (TRANSPOSED, 143.5 µs at S = 8k, B×H = 64 on
the H200) wrote the copy as Vᵀ bytes only for this pass to transpose them back. V's bytes move two d
per int16 (`_vt_byte_pairs`), not byte by byte. sm_90 SASS per 128 × 128 program, 8 warps: the old
copies pass 928 instructions (128 LDS.U8) plus the transposed requant's 1352; the new one 808 without
re-quantization, 1728 with it on the finite path (2336 with the NaN branch). Bytes and scales are the
old route's (tests/test_attention_bwd_copies.py under the interpreter, and
test_gpu_backward_deferred_v_copy_is_bit_identical on the H200 at e872c67); there the pass took
281.5 µs against 143.9 + 180.6 µs for the two kernels before (torch.profiler, S = 8k, B×H = 64).
"""
from __future__ import annotations

import torch

from . import quantize as QZ
from ._triton_env import HAS_TRITON, INTERPRET
from .attention_operands import deferred_with_scales, materialize_off_diagonal
from .buffers import carve
from .formats import FP8_TINY
from .relaunch import Relaunch

if HAS_TRITON:
    import triton
    import triton.language as tl

    from .attention_quant import to_bf16
    from .quantize import (
        _HW_FP8,
        _INF_BITS,
        _abs_bits,
        _div_by_shared,
        _e4m3_code,
        _e4m3_value,
        _fp8_scale,
        _store_e4m3_pairs,
    )

    @triton.jit
    def row_max_and_inverse_sum(LSE2, MOFF, bh, offs_m, S):
        """Per query row: the integer row max M and 1/l from the saved statistics (reference.unpack_stats)."""
        lse2 = tl.load(LSE2 + bh * S + offs_m)
        m = tl.floor(lse2) - tl.load(MOFF + bh * S + offs_m).to(tl.float32)
        return m, tl.exp2(m - lse2)

    @triton.jit
    def row_stats(LSE2, MOFF, DELTA, DO, DOS, bh, offs_m, offs_d, S, D: tl.constexpr):
        """Per query row of one tile: M, 1/l (`row_max_and_inverse_sum`), delta, dO values and scale."""
        m, linv = row_max_and_inverse_sum(LSE2, MOFF, bh, offs_m, S)
        delta = tl.load(DELTA + bh * S + offs_m)
        do = tl.load(DO + bh * S * D + offs_m[:, None] * D + offs_d[None, :])
        sdo = tl.load(DOS + bh * S + offs_m)
        return m, linv, delta, do, sdo

    @triton.jit
    def scaled_do(do, w, INTERP: tl.constexpr):
        """The bf16 dV product's B operand (specs without `fp8_dv`): bf16(dO · w) per row, w = r·prs·s_dO / l
        (P's dequantization, dO's scale folded)."""
        return to_bf16(do.to(tl.float32) * w[:, None], INTERP)

    @triton.jit
    def _query_copies_kernel(Q, QB, DO, DOS, LSE2, MOFF, DELTA, QS, STATS, S, D: tl.constexpr, BR: tl.constexpr,
                             WITH_STATS: tl.constexpr, ROWS: tl.constexpr):
        """QB for BR query rows of one head; WITH_STATS: the rows' statistics as `query_stats` lays them out."""
        bh = tl.program_id(1).to(tl.int64)
        offs_m = tl.program_id(0) * BR + tl.arange(0, BR)
        offs_d = tl.arange(0, D)
        rows = bh * S * D + offs_m[:, None] * D + offs_d[None, :]
        tl.store(QB + rows, tl.load(Q + rows).to(tl.bfloat16))
        if WITH_STATS:
            m, linv = row_max_and_inverse_sum(LSE2, MOFF, bh, offs_m, S)  # as `row_stats`: the same bits
            base = STATS + bh * ROWS * S + offs_m
            tl.store(base, tl.load(QS + bh * S + offs_m))
            tl.store(base + S, m)
            tl.store(base + 2 * S, linv)
            tl.store(base + 3 * S, tl.load(DELTA + bh * S + offs_m))
            tl.store(base + 4 * S, tl.load(DOS + bh * S + offs_m))

    @triton.jit
    def _vt_byte_pairs(VT, base, S, D: tl.constexpr, BR: tl.constexpr):
        """The E4M3 bytes (int32) of BR tokens of one Vᵀ head [D, S] from `base` (the first token's byte at
        d = 0), as [D/2, BR/2, 2 (token), 2 (d)]: read two tokens per int16, then transposed 2 × 2 in the
        thread, so that the last axis holds two consecutive d of one token (the pair a row stores as one
        int16)."""
        dl = tl.arange(0, D // 2)
        pr = tl.arange(0, BR // 2)
        src = (VT + base).to(tl.pointer_type(tl.int16)) + (2 * dl)[:, None] * (S // 2) + pr[None, :]
        a = tl.load(src).to(tl.int32)  # d even: tokens 2p (low byte), 2p + 1 (high)
        b = tl.load(src + S // 2).to(tl.int32)  # d odd
        return tl.join(tl.join(a & 0xFF, (a >> 8) & 0xFF), tl.join(b & 0xFF, (b >> 8) & 0xFF))

    @triton.jit
    def _row_pair_ptrs(R, base, D: tl.constexpr, BR: tl.constexpr):
        """int16 pointers [2 (token), BR/2, D/2] of BR rows of D bytes from `base`: token 2p + t, d 2·dl and
        2·dl + 1 (the low byte first: little-endian)."""
        t = tl.arange(0, 2)[:, None, None]
        pr = tl.arange(0, BR // 2)[None, :, None]
        dl = tl.arange(0, D // 2)[None, None, :]
        return (R + base).to(tl.pointer_type(tl.int16)) + (2 * pr + t) * (D // 2) + dl

    @triton.jit
    def _store_byte_pairs(R, base, code, D: tl.constexpr, BR: tl.constexpr):
        """Store codes [D/2, BR/2, 2 (token), 2 (d)] (`_vt_byte_pairs`) as BR rows of D bytes, two d per int16."""
        lo, hi = tl.split(code)
        tl.store(_row_pair_ptrs(R, base, D, BR), tl.permute(((lo & 0xFF) | (hi << 8)).to(tl.int16), (2, 1, 0)))

    @triton.jit
    def _store_bytes_transposed(XT, byte, bh, pid, S, D: tl.constexpr, BR: tl.constexpr):
        """byte [BR tokens, D] (uint8) of one head's tokens pid·BR.. into its K-major copy XT [D, S] (uint8), the
        tokens of each 16 in an fp8 dS buffer's key order (`attention_bwd_gluon.DS_KEY_ORDER`: 0, 8, 1, 9, ...), two
        tokens to an int16 (the earlier one's byte low: little-endian), so that the transposition moves 16-bit words
        rather than bytes one by one."""
        # (w, h, g, d): token 16w + 8h + g goes to pair 8w + g, byte h
        lo, hi = tl.split(tl.permute(tl.reshape(byte, [BR // 16, 2, 8, D]), (0, 2, 3, 1)))  # [BR/16, 8, D] each
        words = tl.reshape((lo.to(tl.int16) & 0xFF) | (hi.to(tl.int16) << 8), [BR // 2, D])
        pr = tl.arange(0, BR // 2)
        ptr = (XT + bh * S * D + pid * BR).to(tl.pointer_type(tl.int16)) + tl.arange(0, D)[None, :] * (S // 2)
        tl.store(ptr + pr[:, None], words)

    @triton.jit
    def _key_copies_kernel(K, KS, KB, KBS, VT, VS, VBT, KBF, KBBF, VR, VBR, VBS, S, D: tl.constexpr,
                           BR: tl.constexpr, K_OFF: tl.constexpr, K_REQ: tl.constexpr, V_OFF: tl.constexpr,
                           V_REQ: tl.constexpr, TINY: tl.constexpr, DO_K: tl.constexpr = True,
                           DO_V: tl.constexpr = True, K_T: tl.constexpr = False):
        """KBF, VR and (K_OFF / V_OFF) the token-block copies' KBBF, VBR for BR keys of one K/V head.
        V's bytes move two d per int16 (`_vt_byte_pairs`): a transpose, no arithmetic. V_REQ (BR = the
        token block): V's token-block copy is not given (VBT unread); its rows VBR and block scale VBS are
        re-quantized here from Vᵀ's per-token bytes and VS, as `quantize._fp8_requant_blocks_kernel` does
        (same bytes and scale: the same value, amax, division and E4M3 conversion per element). K_REQ (BR =
        the token block) likewise for K: its copy's bytes KB (uint8) and block scale KBS from K's per-token
        bytes and KS, in the read that writes KBF, and KBBF from those bytes. K_T: KBF and KBBF are K's and its
        copy's bytes K-major ([D, S] a head, uint8, `_store_bytes_transposed`) instead of bf16 rows."""
        bh = tl.program_id(1).to(tl.int64)
        pid = tl.program_id(0)
        offs_n = pid * BR + tl.arange(0, BR)
        offs_d = tl.arange(0, D)
        rows = bh * S * D + offs_n[:, None] * D + offs_d[None, :]
        if DO_K:
            k8 = tl.load(K + rows)
            if K_T:
                _store_bytes_transposed(KBF, k8.to(tl.uint8, bitcast=True), bh, pid, S, D, BR)
            else:
                tl.store(KBF + rows, k8.to(tl.bfloat16))
            if K_REQ:
                x = _e4m3_value(k8.to(tl.uint8, bitcast=True).to(tl.int32)) * tl.load(KS + bh * S + offs_n)[:, None]
                amax = tl.max(tl.max(_abs_bits(x), axis=1), axis=0)
                kscale = _fp8_scale(amax, TINY)
                tl.store(KBS + bh * (S // BR) + pid, kscale)
                q = _div_by_shared(x, kscale)
                if _HW_FP8 and amax < _INF_BITS:  # no quotient is NaN: the hardware's bytes need no NaN fix
                    f8 = q.to(tl.float8e4nv)
                    tl.store(KB + rows, f8.to(tl.uint8, bitcast=True))
                    if K_T:
                        _store_bytes_transposed(KBBF, f8.to(tl.uint8, bitcast=True), bh, pid, S, D, BR)
                    else:
                        tl.store(KBBF + rows, f8.to(tl.bfloat16))
                else:
                    code = _e4m3_code(q).to(tl.uint8)
                    tl.store(KB + rows, code)
                    if K_T:
                        _store_bytes_transposed(KBBF, code, bh, pid, S, D, BR)
                    else:
                        # the conversion K_OFF's load applies to given bytes (the interpreter's fp8 cast included)
                        tl.store(KBBF + rows, code.to(tl.float8e4nv, bitcast=True).to(tl.bfloat16))
            elif K_OFF:
                if K_T:
                    _store_bytes_transposed(KBBF, tl.load(KB + rows).to(tl.uint8, bitcast=True), bh, pid, S, D, BR)
                else:
                    tl.store(KBBF + rows, tl.load(KB + rows).to(tl.bfloat16))
        if DO_V:
            base = bh * S * D + pid * BR  # Vᵀ's byte of (d = 0, the first token)
            row0 = bh * S * D + pid * BR * D  # the rows' first byte
            code = _vt_byte_pairs(VT, base, S, D, BR)
            _store_byte_pairs(VR, row0, code, D, BR)
            if V_REQ:
                tok = pid * BR + 2 * tl.arange(0, BR // 2)[:, None] + tl.arange(0, 2)[None, :]
                x = _e4m3_value(code) * tl.load(VS + bh * S + tok)[None, :, :, None]
                amax = tl.max(tl.max(tl.max(tl.max(_abs_bits(x), axis=3), axis=2), axis=1), axis=0)
                bscale = _fp8_scale(amax, TINY)
                tl.store(VBS + bh * (S // BR) + pid, bscale)
                _store_e4m3_pairs(_row_pair_ptrs(VBR, row0, D, BR), None, _div_by_shared(x, bscale), amax < _INF_BITS)
            elif V_OFF:
                _store_byte_pairs(VBR, row0, _vt_byte_pairs(VBT, base, S, D, BR), D, BR)


# Rows of `query_stats` per head: s_q, M, 1/l, delta, s_dO, then padding (a TMA box of [8, sub-tile])
STATS_ROWS = 8


def query_stats(q) -> torch.Tensor:
    """An empty [B·Hq, STATS_ROWS, S] fp32 buffer for `bf16_copies(stats=...)`: per query, the values every
    dK/dV sub-tile needs (s_q, M = floor(lse2) - M offset, 1/l = exp2(M - lse2), delta, s_dO: `row_stats`'
    expressions, so the same bits), one row of S per value, so that the Gluon dK/dV kernel copies a
    sub-tile's five vectors into shared memory with one TMA load instead of five gathers from global memory
    whose latency each sub-tile waited out (Nsight Compute on the H200: 'long scoreboard' ~20% of its
    warps' stalls, session9_ncu.sh)."""
    b, hq, seq, _ = q.vals.shape
    return torch.empty(b * hq, STATS_ROWS, seq, dtype=torch.float32, device=q.vals.device)


def pre_eligible(q, k, v, do, spec) -> bool:
    """The copies serve FP8 Q, K, V and dO bytes with P and dO in fp8 (so dV is an FP8 product,
    `AttentionSpec.fp8_dv`) and dS in bf16."""
    fp8 = torch.float8_e4m3fn
    return (spec.fp8_dv and spec.ds == "bf16" and q.vals.dtype == fp8 and k.vals.dtype == fp8
            and v.vals_t.dtype == fp8 and do.vals.dtype == fp8)


# The key copies as two launches, K's half at 16 warps (64 registers: two programs per SM, twice the warps of
# the joint program's 8 at 122 registers) and V's at 8: on the H200 at S = 8k, B×H = 64 (session10_final.sh,
# torch.profiler, two rounds) 113.1 + 86.8 / 113.6 + 86.9 µs against 295.2 / 304.2 µs for one launch (the
# same bytes: tests/test_attention_bwd_copies.py, test_gpu_backward_deferred_copies_are_bit_identical).
# K's half as K-major bytes (k_t: the fp8 dS buffer's dQ product, the `fp8` preset's) at 4 warps: there it moves
# 16-bit words across the tile (`_store_bytes_transposed`), and fewer threads a program went faster — 139.3 µs at 4
# warps, 164.3 at 8, 173.8 at 16, 189.6 at 32 (H100, S = 8k, B×H = 64, session 31, launch_gaps.py; the same bytes).
KEY_COPIES_SPLIT = True
KEY_COPIES_WARPS = {"k": 16, "k_t": 4, "v": 8}


# launched through `relaunch.Relaunch` (host time a backward): Triton's launch path once per plan
_QUERY_COPIES_LAUNCH = Relaunch(_query_copies_kernel) if HAS_TRITON else None
_KEY_COPIES_LAUNCH = Relaunch(_key_copies_kernel) if HAS_TRITON else None


def _rows_per_program(seq: int) -> int:
    return next(r for r in (128, 64, 32, 16, 8, 4, 2, 1) if seq % r == 0)


def bf16_copies(q, k, v, do, lse2, moff, delta, stats: torch.Tensor | None = None, k_t: bool = False,
                fold_k: bool = False, fold_v: bool = False):
    """(QB, KBF, KBBF, VR, VBR, VBS, KB, KBS) for the backward kernels (see the module docstring).
    Operands as `attention_bwd.backward` takes them; KBBF / VBR are KBF / VR without the token-block copies.
    VBS: V's block scales, v.off.scale, or where V's copy is deferred (`OffDiagonal.deferred`: only its rows
    are read on this path) the ones re-quantized here with VBR. KB, KBS: K's token-block copy, k.off's, or
    where it is deferred re-quantized here (None without the copy). stats: a `query_stats` buffer to fill.
    k_t (an FP8 dQ product: launch options ds_out with fp8_dq): KBF and KBBF are K's and its copy's E4M3 bytes
    K-major, [B, Hkv, D, S] with the tokens of each 16 in the fp8 dS buffer's key order
    (`attention_bwd_gluon.DS_KEY_ORDER`), in place of the bf16 rows that product does not read.
    fold_k (launch option fold_k of `attention_bwd.backward`): K's half is not run — the ws dK/dV kernel writes KBF
    and KBBF (bf16 rows, or with k_t K-major bytes) into the buffers returned here and derives K's deferred copy
    itself (`attention_dkdv_ws._fold_k_copy`) — so KB is None and KBS k.off.scale, the block scales the forward
    saved. fold_v (with fold_k, `attention_bwd.FOLD_V`): V's half is not run either — the ws dK/dV kernel makes V's
    rows from Vᵀ's bytes and its deferred copy from those (`attention_dkdv_ws._v_rows`, `_fold_v_copy`) — so VR and
    VBR are None and VBS is v.off.scale, the block scales the forward saved; with both, no key copies launch runs."""
    b, hq, seq, d = q.vals.shape
    hkv = k.vals.shape[1]
    q_rows = rows = _rows_per_program(seq)  # rows: the key copies' programs (a deferred copy's block below)
    warps = 4 if INTERPRET else 8
    if stats is not None and stats.shape != (b * hq, STATS_ROWS, seq):
        raise ValueError(f"bf16_copies: stats {tuple(stats.shape)} must have the shape {(b * hq, STATS_ROWS, seq)} "
                         f"(`query_stats`)")
    # a deferred copy is re-quantized here, one program per token block (its scale is the program's amax),
    # where the block is a power of two; else the separate pass computes it first
    k, v = (op if op.off is None or not op.off.deferred or QZ._is_pow2(op.off.block) else
            materialize_off_diagonal(op, QZ) for op in (k, v))
    if fold_k and not deferred_with_scales(k):
        raise ValueError("bf16_copies(fold_k=True): K's token-block copy must be deferred with its block scales "
                         "given (k.off.scale)")
    if fold_v and not (fold_k and deferred_with_scales(v)):
        raise ValueError("bf16_copies(fold_v=True): needs fold_k=True and V's token-block copy deferred with its "
                         "block scales given (v.off.scale)")
    k_req = k.off is not None and k.off.deferred and not fold_k
    v_req = v.off is not None and v.off.deferred and not fold_v
    if k_req or v_req:
        rows = (k.off if k_req else v.off).block
        if k_req and v_req and k.off.block != v.off.block:
            raise ValueError(f"bf16_copies: K's and V's deferred copies have token blocks {k.off.block} and "
                             f"{v.off.block}; one pass re-quantizes both with one block")
    # the copies live and die together (the backward kernels' operands): one allocation (`buffers.carve`)
    keys = (b, hkv, seq, d)
    k_copy = ((b, hkv, d, seq), k.vals.dtype) if k_t else (keys, torch.bfloat16)
    parts = {"qb": ((b, hq, seq, d), torch.bfloat16), "kbf": k_copy}
    if not fold_v:
        parts["vr"] = (keys, v.vals_t.dtype)
    if k.off is not None:
        parts["kbbf"] = k_copy
    if k_req:
        parts["kb"], parts["kbs"] = (keys, k.vals.dtype), ((b, hkv, seq // rows), torch.float32)
    if v.off is not None and not fold_v:
        parts["vbr"] = (keys, v.vals_t.dtype)
    if v_req:
        parts["vbs"] = ((b, hkv, seq // rows), torch.float32)
    out = dict(zip(parts, carve(q.vals.device, list(parts.values())), strict=True))
    qb, kbf, vr = out["qb"], out["kbf"], out.get("vr")
    kbbf, vbr = out.get("kbbf", kbf), out.get("vbr", vr)
    kb = out["kb"] if k_req else k.off.vals if k.off is not None else None
    kbs = out["kbs"] if k_req else k.off.scale if k.off is not None else None
    vbs = out["vbs"] if v_req else v.off.scale if v.off is not None else v.scale
    _QUERY_COPIES_LAUNCH((seq // q_rows, b * hq),
                         (q.vals, qb, do.vals, do.scale, lse2, moff, delta, q.scale,
                          stats if stats is not None else lse2, seq),
                         dict(D=d, BR=q_rows, WITH_STATS=stats is not None, ROWS=STATS_ROWS), dict(num_warps=warps))
    if fold_v:  # both halves are the dK/dV kernel's
        return qb, kbf, kbbf, None, None, vbs, kb, kbs
    vt_bytes = v.vals_t.view(torch.uint8)
    key_args = (k.vals, k.scale, kb.view(torch.uint8) if k_req else kb if kb is not None else k.vals,
                kbs if kbs is not None else k.scale, vt_bytes, v.scale,
                v.off.vals.view(torch.uint8) if v.off is not None and not v_req else vt_bytes,
                *((kbf.view(torch.uint8), kbbf.view(torch.uint8)) if k_t else (kbf, kbbf)),
                vr.view(torch.uint8), vbr.view(torch.uint8), vbs, seq)
    flags = dict(D=d, BR=rows, K_OFF=k.off is not None, K_REQ=k_req, V_OFF=v.off is not None, V_REQ=v_req,
                 TINY=FP8_TINY, K_T=k_t)
    if KEY_COPIES_SPLIT or fold_k:  # K's and V's halves as two launches, each at its own warps
        for part, do_k in (("k_t" if k_t else "k", True), ("v", False))[fold_k:]:
            _KEY_COPIES_LAUNCH((seq // rows, b * hkv), key_args, dict(**flags, DO_K=do_k, DO_V=not do_k),
                               dict(num_warps=warps if INTERPRET else KEY_COPIES_WARPS[part]))
    else:
        _KEY_COPIES_LAUNCH((seq // rows, b * hkv), key_args, flags, dict(num_warps=warps))
    return qb, kbf, kbbf, vr, vbr, vbs if v.off is not None else None, kb, kbs
