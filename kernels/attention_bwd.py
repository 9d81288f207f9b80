"""FLAMIA backward kernels (Triton): dK/dV and dQ from the forward's own quantized operands.

Both kernels recompute the scores from the *same* Q8, K8 bytes and scales the
forward used, and P from the saved integer row max M and sum l, so P's bytes
are the forward's (FLAMIA.md, "consistent"). Per tile (see `reference`):

    dV_j += Σ_i P8_ij · bf16(dO_i · r_i·prs / l_i)        then dV_j /= s_v[j]
       or, P and dO in fp8 (`AttentionSpec.fp8_dv`, the fp8 preset), one FP8 product:
    dV_j += Σ_i E4M3(p_ij · (s_dO[i] / l_i) / τ_j) · dO8_i  then dV_j *= τ_j / 256 (`reference.dv_row_scale`)
    dP    = dot(dO, Vᵀ) · (s_dO ⊗ s_v)                     dO quantized per token (spec.do)
    dS    = (p / l) ∘ (dP - delta)                           delta = rowsum(dO ∘ O), a pre-pass
    dK_j += deq_rows(dSᵀ ∘ s_q)_j · Q8                      dS quantized along queries (contraction)
    dQ_i += deq_rows(dS ∘ s_k)_i · K8                       dS quantized along keys (contraction)

Tiles: dK/dV programs own a 128-key tile and walk 64-query sub-tiles; dQ programs own a
128-query tile and walk 64-key sub-tiles (DS_TILE: dS's scale group, one row scale per
sub-tile, the same in `reference`), so the [128, 64] score tiles and two [128, D] fp32
accumulators fit in registers.

Partner folding (FLAMIA.md): a per-token scale along a product's contraction axis
(s_dO in dV, s_q in dK, s_k in dQ) is multiplied into the partner before the
partner is quantized or rounded, so the stored bytes serve both orientations.
The score recompute and dP (dPᵀ = V·dOᵀ in the dK/dV kernel, dP = dO·Vᵀ in the dQ kernel, both
operands per-token fp8) are FP8 products, and so is dV where P and dO are fp8 (its B operand dO's bytes
K-major, dO8ᵀ, written by dO's pre-pass; its A operand P·s_dO with one scale per key row, constant along
the queries, so one accumulator chains every sub-tile); dK / dQ (and dV otherwise) run on bf16 tensor
cores over FP8 values (exact in bf16). The dQ kernel's dP needs V's rows K-major (D contiguous), as an FP8 wgmma's B
operand must be: with `pre` it reads the row-major copy of `attention_bwd_copies`, else it stages
a register copy of the stored Vᵀ. Hopper's FP8 MMA
accumulates with reduced precision, so the two kernels' dP differ in the last bits (dQ through
the atomic path vs the dQ kernel on the H200: 3.3e-5 apart, 1.3e-3 while the latter's dP was
bf16); both match the reference.
GQA: one dK/dV program loops over the query heads that share its K/V head, so no atomics
are needed (config dq="atomic", a benchmark option, adds dQ atomically instead, see
`launch_config`).

Document masking (HAS_DOC): each sub-tile ANDs "same document" into its mask (and r, as in
the forward, is over the keys the row sees). dK/dV programs stop after the last query sub-tile
of their last key's document, dQ programs start at the key sub-tile of their first query's
document start: the skipped sub-tiles are masked for every row, so the result is bit-identical.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import replace

import torch

from . import attention_bwd_gluon, attention_dkdv_ws
from . import quantize as QZ
from ._triton_env import HAS_TRITON, INTERPRET
from .attention_bwd_copies import bf16_copies, pre_eligible, query_stats
from .attention_operands import deferred_with_scales, materialize_off_diagonal
from .attention_quant import fmt_code, p_global_value
from .dq_from_ds import dq_from_ds
from .dq_row_scale import dq_row_scale_fast
from .dv_row_scale import dv_row_scale_fast
from .formats import FP8_TINY
from .reference import DS_TILE, dk_row_scale, dq_row_scale, unpack_stats

if HAS_TRITON:
    import triton
    import triton.language as tl

    from .attention_bwd_copies import row_stats, scaled_do
    from .attention_quant import _e4m3_round, finite_row_max, mma, p_fp8_scaled, quant_rows, to_bf16

    @triton.jit
    def _dp_product(a, b, INTERP: tl.constexpr):
        """a·bᵀ over D, unscaled: dPᵀ = V·dOᵀ in the dK/dV kernel, dP = dO·Vᵀ in the dQ kernel. An FP8
        product where both are fp8 (both K-major: D is contiguous), else bf16 over their values."""
        if a.dtype == b.dtype:
            return mma(a, tl.trans(b), INTERP)
        else:
            return mma(a.to(tl.bfloat16), tl.trans(b.to(tl.bfloat16)), INTERP)

    @triton.jit
    def _kv_tile(dk, dv, k, ks, v, vs, Q, QS, DO, DOS, LSE2, MOFF, DELTA, bh, start_m, offs_n, offs_d, S,
                 qk_scale, P_GLOB, kdoc, DOC, doc_off, DQA, RD, RB, rd_off, rb, D: tl.constexpr, BN: tl.constexpr,
                 BM: tl.constexpr, PV_FMT: tl.constexpr, DS_FMT: tl.constexpr, DIAG: tl.constexpr,
                 FOLD: tl.constexpr, SAFE: tl.constexpr, HAS_DOC: tl.constexpr, TINY: tl.constexpr,
                 INTERP: tl.constexpr, FUSE_DQ: tl.constexpr, R_PRE: tl.constexpr, QB, DOT, PRE: tl.constexpr,
                 DP_EARLY: tl.constexpr, itau, FP8_DV: tl.constexpr):
        """One BM-query sub-tile's contribution to the dK, dV of one BN-key tile (tiles are [BN, BM]).
        k, ks, v, vs: the key tile as this sub-tile's forward read it (per-token on the diagonal,
        the token-block copy's bytes with its scale broadcast off it). FOLD: V's per-token scale
        was folded into P (the caller divides dV by s_v after these sub-tiles). FUSE_DQ (dS in
        bf16 only): also add this sub-tile's dQ rows into the fp32 DQA with atomics. R_PRE: the
        fold's row factor r comes precomputed over the forward's whole key tile (RD: per query
        row on the causal diagonal, at rd_off; RB: the tile's max, element rb), which a BN-key
        program narrower than that tile cannot see. PRE: the dK product's bf16 Q comes precomputed (QB:
        `attention_bwd_copies`) instead of being converted here for every key tile. FP8_DV
        (`AttentionSpec.fp8_dv`): dV as one FP8 product, E4M3((p · (1/l · s_dO)) · itau) against dO's bytes
        read K-major from DOT (dO8ᵀ), itau = 1/τ per key (`reference.dv_row_scale`; the caller multiplies dV
        by τ/256 after every sub-tile), no V fold."""
        offs_m = start_m + tl.arange(0, BM)
        q = tl.load(Q + bh * S * D + offs_m[:, None] * D + offs_d[None, :])
        qs = tl.load(QS + bh * S + offs_m)
        m, linv, delta, do, sdo = row_stats(LSE2, MOFF, DELTA, DO, DOS, bh, offs_m, offs_d, S, D)
        st = mma(k, tl.trans(q), INTERP) * (ks[:, None] * (qs * qk_scale)[None, :])
        if DP_EARLY:  # dPᵀ needs none of the softmax work below: issued here, ptxas runs that work
            # while the product is in flight (in the sm_90 SASS the exp2s sit between its wgmma and its wait)
            dpt = _dp_product(v, do, INTERP)
        if HAS_DOC:
            keep = kdoc[:, None] == tl.load(DOC + doc_off + offs_m)[None, :]
            if DIAG:
                keep = keep & (offs_n[:, None] <= offs_m[None, :])
            st = tl.where(keep, st, float("-inf"))
        elif DIAG:
            keep = offs_n[:, None] <= offs_m[None, :]
            st = tl.where(keep, st, float("-inf"))
        m_use = finite_row_max(m, HAS_DOC)
        pt = tl.exp2(st - (m_use - 8.0)[None, :])  # (BN, BM), ×256 as in the forward
        if FP8_DV:
            y = p_fp8_scaled((pt * (linv * sdo)[None, :]) * itau[:, None], INTERP)
            dot = tl.load(DOT + bh * S * D + offs_d[:, None] * S + offs_m[None, :])  # (D, BM): dO8ᵀ, K-major
            dv += mma(y, tl.trans(dot), INTERP)
        else:
            if FOLD:
                if R_PRE:  # (no document masking here: `backward` refuses it)
                    if SAFE and DIAG:  # max of s_v over the tile's keys j <= i
                        r = tl.load(RD + rd_off + offs_m)
                    else:  # the whole tile (off the diagonal, non-causal, or leaky)
                        r = tl.zeros([BM], tl.float32) + tl.load(RB + rb)
                else:
                    r = tl.zeros([BM], tl.float32) + tl.max(vs, 0)  # the whole tile (nothing masked, or leaky)
                    if SAFE:
                        if DIAG or HAS_DOC:  # the keys row i sees
                            r = tl.max(tl.where(keep, vs[:, None], 0.0), 0)
                            r = tl.where(r > 0.0, r, 1.0)
                xt = pt * vs[:, None] * tl.math.div_rn(tl.full([BM], 1.0, tl.float32), r)[None, :]
            else:
                r = tl.full([BM], 1.0, tl.float32)
                xt = pt
            if PV_FMT == 1:  # the forward's P bytes, transposed (exact in bf16)
                pq_t = p_fp8_scaled(xt, INTERP).to(tl.bfloat16)
                prs = tl.full([BM], 1.0 / 256.0, tl.float32)
            else:  # quantized along keys, as the forward did
                pq, prs = quant_rows(tl.trans(xt) * (1.0 / 256.0), P_GLOB, PV_FMT, True, BM, BN, TINY, INTERP)
                pq_t = tl.trans(pq).to(tl.bfloat16)
            dv += mma(pq_t, scaled_do(do, r * prs * sdo * linv, INTERP), INTERP)
        if not DP_EARLY:
            dpt = _dp_product(v, do, INTERP)
        dpt = dpt * (vs[:, None] * sdo[None, :])
        dst = (pt * (linv * (1.0 / 256.0))[None, :]) * (dpt - delta[None, :])
        yq, ys = quant_rows(dst * qs[None, :], P_GLOB, DS_FMT, False, BN, BM, TINY, INTERP)
        if PRE:
            qb = tl.load(QB + bh * S * D + offs_m[:, None] * D + offs_d[None, :])
        else:
            qb = q.to(tl.bfloat16)
        dk += mma(yq.to(tl.bfloat16), qb, INTERP) * ys[:, None]
        if FUSE_DQ:  # dQ_i += bf16(dS ∘ s_k)_i · K8, _q_tile's product: bf16 dS has no group scale,
            # so the 128-key tile needs no split along the contraction
            dsk = to_bf16(dst * ks[:, None], INTERP)
            dqp = mma(tl.trans(dsk), k.to(tl.bfloat16), INTERP)
            tl.atomic_add(DQA + bh * S * D + offs_m[:, None] * D + offs_d[None, :], dqp, sem="relaxed")
        return dk, dv

    @triton.jit
    def _dkdv_kernel(Q, QS, K, KS, KB, KBS, VT, VS, VBT, VBS, DO, DOS, LSE2, MOFF, DELTA, DOC, DSTART, DEND, DK,
                     DV, DQA, RD, RB, QB, DOT, TAU, VR, VBR, qk_scale, sm_scale, P_GLOB, S, G, HKV, D: tl.constexpr,
                     BN: tl.constexpr, BM: tl.constexpr, PV_FMT: tl.constexpr, DS_FMT: tl.constexpr,
                     CAUSAL: tl.constexpr, SAFE: tl.constexpr, TINY: tl.constexpr, INTERP: tl.constexpr,
                     HAS_DOC: tl.constexpr = False,
                     K_OFF: tl.constexpr = False, V_OFF: tl.constexpr = False, FUSE_DQ: tl.constexpr = False,
                     TB: tl.constexpr = 128, R_PRE: tl.constexpr = False, PRE: tl.constexpr = False,
                     DP_EARLY: tl.constexpr = True, FP8_DV: tl.constexpr = False):
        """dK, dV of one BN-key tile, BN = TB (the forward's tile) or a part of it (R_PRE then). FP8_DV: dV as
        an FP8 product (`_kv_tile`) over dO8ᵀ (DOT) with the keys' row scales τ (TAU [B·Hkv, S])."""
        pid_n = tl.program_id(0)
        bhk = tl.program_id(1).to(tl.int64)  # b * Hkv + h_kv
        offs_n = pid_n * BN + tl.arange(0, BN)
        offs_d = tl.arange(0, D)
        rows = bhk * S * D + offs_n[:, None] * D + offs_d[None, :]
        rows_t = bhk * S * D + offs_d[:, None] * S + offs_n[None, :]
        k = tl.load(K + rows)
        ks = tl.load(KS + bhk * S + offs_n)
        vs = tl.load(VS + bhk * S + offs_n)
        # stored dtype (fp8: a quarter of bf16's registers); PRE: the rows of `attention_bwd_copies`, where
        # V's token-block copy exists only as rows (its Vᵀ bytes are not computed on that path)
        if PRE:
            v = tl.load(VR + rows)
        else:
            v = tl.trans(tl.load(VT + rows_t))
        dk = tl.zeros([BN, D], tl.float32)
        dv = tl.zeros([BN, D], tl.float32)
        if FP8_DV:
            tau = tl.load(TAU + bhk * S + offs_n)
            itau = tl.math.div_rn(tl.full([BN], 1.0, tl.float32), tau)
        else:
            itau = vs  # unread
        lo = 0
        hi = S
        doc_off = (bhk // HKV) * S
        if HAS_DOC:  # query sub-tiles wholly outside this tile's documents are masked for every key: skip
            kdoc = tl.load(DOC + doc_off + offs_n)
            hi = (tl.load(DEND + doc_off + pid_n * BN + BN - 1) + BM - 1) // BM * BM
            if not CAUSAL:
                lo = tl.load(DSTART + doc_off + pid_n * BN) // BM * BM
        else:
            kdoc = offs_n
        t = pid_n * BN // TB  # the forward's key tile holding this program's keys
        rd_off = bhk * S
        rb = bhk * (S // TB) + t
        # the diagonal: queries of tile t (from this program's first key when causal: earlier rows see
        # none of its keys), for every query head sharing this K/V head: per-token K, V
        for g in range(G):
            bh = bhk * G + g
            for start_m in range(pid_n * BN if CAUSAL else t * TB, (t + 1) * TB, BM):
                dk, dv = _kv_tile(dk, dv, k, ks, v, vs, Q, QS, DO, DOS, LSE2, MOFF, DELTA, bh, start_m, offs_n,
                                  offs_d, S, qk_scale, P_GLOB, kdoc, DOC, doc_off, DQA, RD, RB, rd_off, rb, D, BN,
                                  BM, PV_FMT, DS_FMT, CAUSAL, True, SAFE, HAS_DOC, TINY, INTERP, FUSE_DQ, R_PRE,
                                  QB, DOT, PRE, DP_EARLY, itau, FP8_DV)
        if V_OFF and not FP8_DV:  # the diagonal's V fold undone now: off it, P carries no V scale
            dv = dv * tl.math.div_rn(tl.full([BN], 1.0, tl.float32), vs)[:, None]
        # Off the diagonal: the copies the forward read there (bytes, one scale for the tile),
        # loaded only now so the per-token tiles' registers are free again.
        if K_OFF:
            k_o = tl.load(KB + rows)
            ks_o = tl.zeros([BN], tl.float32) + tl.load(KBS + rb)
        else:
            k_o = k
            ks_o = ks
        if V_OFF:
            if PRE:
                v_o = tl.load(VBR + rows)
            else:
                v_o = tl.trans(tl.load(VBT + rows_t))
            vs_o = tl.zeros([BN], tl.float32) + tl.load(VBS + rb)
        else:
            v_o = v
            vs_o = vs
        for g in range(G):  # off the diagonal: the token-block copies
            bh = bhk * G + g
            for start_m in range((t + 1) * TB, hi, BM):
                dk, dv = _kv_tile(dk, dv, k_o, ks_o, v_o, vs_o, Q, QS, DO, DOS, LSE2, MOFF, DELTA, bh, start_m,
                                  offs_n, offs_d, S, qk_scale, P_GLOB, kdoc, DOC, doc_off, DQA, RD, RB, rd_off, rb,
                                  D, BN, BM, PV_FMT, DS_FMT, False, not V_OFF, SAFE, HAS_DOC, TINY, INTERP,
                                  FUSE_DQ, R_PRE, QB, DOT, PRE, DP_EARLY, itau, FP8_DV)
            if not CAUSAL:
                for start_m in range(lo, t * TB, BM):
                    dk, dv = _kv_tile(dk, dv, k_o, ks_o, v_o, vs_o, Q, QS, DO, DOS, LSE2, MOFF, DELTA, bh,
                                      start_m, offs_n, offs_d, S, qk_scale, P_GLOB, kdoc, DOC, doc_off, DQA, RD, RB,
                                      rd_off, rb, D, BN, BM, PV_FMT, DS_FMT, False, not V_OFF, SAFE, HAS_DOC, TINY,
                                      INTERP, FUSE_DQ, R_PRE, QB, DOT, PRE, DP_EARLY, itau, FP8_DV)
        if FP8_DV:  # the rows' scales τ, and P's ×256
            dv = dv * (tau * (1.0 / 256.0))[:, None]
        elif not V_OFF:
            dv = dv * tl.math.div_rn(tl.full([BN], 1.0, tl.float32), vs)[:, None]
        tl.store(DV + rows, to_bf16(dv, INTERP))
        tl.store(DK + rows, to_bf16(dk * sm_scale, INTERP))

    @triton.jit
    def _q_tile(dq, q, qs, do, sdo, m, linv, delta, K, KS, VT, VS, bhk, start_n, offs_m, offs_d, S, P_GLOB,
                qdoc, DOC, doc_off, KB, KBS, VBT, VBS, KBF, KBBF, VR, VBR, D: tl.constexpr, BM: tl.constexpr,
                BN: tl.constexpr, DS_FMT: tl.constexpr, DIAG: tl.constexpr, CAUSAL: tl.constexpr,
                HAS_DOC: tl.constexpr, K_OFF: tl.constexpr, V_OFF: tl.constexpr, TINY: tl.constexpr,
                INTERP: tl.constexpr, TB: tl.constexpr, PRE: tl.constexpr, DP_EARLY: tl.constexpr,
                FP8_DQ: tl.constexpr = False, irho=0):
        """One BN-key sub-tile's contribution to the dQ of BM query rows; DIAG: inside the forward's
        key tile (TB keys) holding those rows (per-token K, V), else the token-block copies where
        the spec has them. PRE: K's bytes as bf16 for the dQ product (KBF, KBBF) and V's rows
        (VR, VBR) come precomputed (`attention_bwd_copies`), so no sub-tile converts or transposes them.
        FP8_DQ (launch option fp8_dq): the product in FP8, E4M3(dS·s_k/ρ) against K's bytes, irho = 1/ρ per row
        (`reference.dq_row_scale`); the caller multiplies the sums by ρ."""
        cols = start_n + tl.arange(0, BN)
        key_off = K_OFF and not DIAG
        val_off = V_OFF and not DIAG
        if key_off:
            k = tl.load(KB + bhk * S * D + cols[:, None] * D + offs_d[None, :])
            ks = tl.zeros([BN], tl.float32) + tl.load(KBS + bhk * (S // TB) + start_n // TB)
        else:
            k = tl.load(K + bhk * S * D + cols[:, None] * D + offs_d[None, :])
            ks = tl.load(KS + bhk * S + cols)
        # V's bytes as rows (BN, D): as dP's B operand, V·(…)ᵀ contracts over D, and an fp8 B must be
        # K-major (D contiguous) in shared memory: PRE's row-major copy, else a register copy of Vᵀ's
        if PRE:
            v = tl.load((VBR if val_off else VR) + bhk * S * D + cols[:, None] * D + offs_d[None, :])
        else:
            v = tl.load((VBT if val_off else VT) + bhk * S * D + offs_d[None, :] * S + cols[:, None])
        if val_off:
            vs = tl.zeros([BN], tl.float32) + tl.load(VBS + bhk * (S // TB) + start_n // TB)
        else:
            vs = tl.load(VS + bhk * S + cols)
        s = mma(q, tl.trans(k), INTERP) * (qs[:, None] * ks[None, :])
        if DP_EARLY:  # issued before the softmax work, as dPᵀ in `_kv_tile`
            dp = _dp_product(do, v, INTERP)
        if HAS_DOC:
            keep = qdoc[:, None] == tl.load(DOC + doc_off + cols)[None, :]
            if DIAG and CAUSAL:
                keep = keep & (offs_m[:, None] >= cols[None, :])
            s = tl.where(keep, s, float("-inf"))
        elif DIAG and CAUSAL:
            s = tl.where(offs_m[:, None] >= cols[None, :], s, float("-inf"))
        m_use = finite_row_max(m, HAS_DOC)
        p = tl.exp2(s - (m_use - 8.0)[:, None])
        if not DP_EARLY:
            dp = _dp_product(do, v, INTERP)
        dp = dp * (sdo[:, None] * vs[None, :])
        ds = (p * (linv * (1.0 / 256.0))[:, None]) * (dp - delta[:, None])
        if FP8_DQ:  # `reference.backward_math(fp8_dq=True)`'s E4M3(dS·s_k·(1/ρ)), exact in fp8
            y8 = _e4m3_round((ds * ks[None, :]) * irho[:, None]).to(tl.float8e4nv)
            return dq + mma(y8, k, INTERP)
        yq, ys = quant_rows(ds * ks[None, :], P_GLOB, DS_FMT, False, BM, BN, TINY, INTERP)
        if PRE:
            kb = tl.load((KBBF if key_off else KBF) + bhk * S * D + cols[:, None] * D + offs_d[None, :])
        else:
            kb = k.to(tl.bfloat16)
        dq += mma(yq.to(tl.bfloat16), kb, INTERP) * ys[:, None]
        return dq

    @triton.jit
    def _dq_kernel(Q, QS, K, KS, KB, KBS, VT, VS, VBT, VBS, DO, DOS, LSE2, MOFF, DELTA, DOC, DSTART, DEND, DQ,
                   KBF, KBBF, VR, VBR, qk_scale, sm_scale, P_GLOB, S, G, HKV, D: tl.constexpr, BM: tl.constexpr,
                   BN: tl.constexpr, DS_FMT: tl.constexpr, CAUSAL: tl.constexpr, TINY: tl.constexpr,
                   INTERP: tl.constexpr,
                   HAS_DOC: tl.constexpr = False, K_OFF: tl.constexpr = False, V_OFF: tl.constexpr = False,
                   TB: tl.constexpr = 128, PRE: tl.constexpr = False, DP_EARLY: tl.constexpr = True,
                   FP8_DQ: tl.constexpr = False, RHO=0):
        """dQ of BM query rows, BM = TB (the forward's tile) or half of it; FP8_DQ (launch option fp8_dq): the dQ
        product in FP8 under the rows' bound scales RHO (`_q_tile`)."""
        pid_m = tl.num_programs(0) - 1 - tl.program_id(0)  # longest causal rows first
        bh = tl.program_id(1).to(tl.int64)
        bhk = bh // G
        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_d = tl.arange(0, D)
        rows = bh * S * D + offs_m[:, None] * D + offs_d[None, :]
        q = tl.load(Q + rows)
        qs = tl.load(QS + bh * S + offs_m) * qk_scale
        m, linv, delta, do, sdo = row_stats(LSE2, MOFF, DELTA, DO, DOS, bh, offs_m, offs_d, S, D)
        dq = tl.zeros([BM, D], tl.float32)
        if FP8_DQ:
            rho = tl.load(RHO + bh * S + offs_m)
            irho = tl.math.div_rn(tl.full([BM], 1.0, tl.float32), rho)  # exact: a power of two
        else:  # unread
            rho = linv
            irho = linv
        hi = S
        doc_off = (bhk // HKV) * S
        if HAS_DOC:  # key sub-tiles wholly outside this tile's documents are masked for every row: skip
            qdoc = tl.load(DOC + doc_off + offs_m)
            lo = tl.load(DSTART + doc_off + pid_m * BM) // BN * BN
            if not CAUSAL:
                hi = (tl.load(DEND + doc_off + pid_m * BM + BM - 1) + BN - 1) // BN * BN
        else:
            qdoc = offs_m
            lo = 0
        tile = pid_m * BM // TB * TB  # the forward's key tile holding these rows: per-token K, V there
        # causal: its keys up to the last row (later sub-tiles are masked for every row)
        tile_end = pid_m * BM + BM if CAUSAL else tile + TB
        for start_n in range(lo, tile, BN):
            dq = _q_tile(dq, q, qs, do, sdo, m, linv, delta, K, KS, VT, VS, bhk, start_n, offs_m, offs_d, S,
                         P_GLOB, qdoc, DOC, doc_off, KB, KBS, VBT, VBS, KBF, KBBF, VR, VBR, D, BM, BN, DS_FMT, False,
                         CAUSAL, HAS_DOC, K_OFF, V_OFF, TINY, INTERP, TB, PRE, DP_EARLY, FP8_DQ, irho)
        for start_n in range(tile, tile_end, BN):  # the diagonal tile: masked when causal
            dq = _q_tile(dq, q, qs, do, sdo, m, linv, delta, K, KS, VT, VS, bhk, start_n, offs_m, offs_d, S,
                         P_GLOB, qdoc, DOC, doc_off, KB, KBS, VBT, VBS, KBF, KBBF, VR, VBR, D, BM, BN, DS_FMT, True,
                         CAUSAL, HAS_DOC, K_OFF, V_OFF, TINY, INTERP, TB, PRE, DP_EARLY, FP8_DQ, irho)
        if not CAUSAL:
            for start_n in range(tile_end, hi, BN):
                dq = _q_tile(dq, q, qs, do, sdo, m, linv, delta, K, KS, VT, VS, bhk, start_n, offs_m, offs_d, S,
                             P_GLOB, qdoc, DOC, doc_off, KB, KBS, VBT, VBS, KBF, KBBF, VR, VBR, D, BM, BN, DS_FMT,
                             False, CAUSAL, HAS_DOC, K_OFF, V_OFF, TINY, INTERP, TB, PRE, DP_EARLY, FP8_DQ, irho)
        if FP8_DQ:
            tl.store(DQ + rows, to_bf16(dq * (rho * sm_scale)[:, None], INTERP))
        else:
            tl.store(DQ + rows, to_bf16(dq * sm_scale, INTERP))


def launch_config(d: int, ds_fmt: str, emulated: bool = False) -> dict:
    """Backward launch on sm_90. The fp8 fast path (D = 128, dS in bf16, no emulated operand) runs
    programs of half a tile with 4 warps, two or more per SM, so one's softmax and conversions run
    beside another's products: dK/dV programs of 64 keys, 2 stages; dQ programs of 64 query rows,
    3 stages; 32-long sub-tiles. Measured on the H200 at S = 8k, B×H = 64, each kernel alone
    (9d391e3): dK/dV 8.41 → 7.89 ms, dQ 6.41 → 5.57 ms against the 8-warp full-tile programs
    (2 stages), which every other case keeps (the dK/dV program then holds two [128, D] fp32
    accumulators). Sub-tiles of 32 where dS's format allows it (bf16, mxfp8: no per-group scale):
    17.0 ms against 19.3 ms (64) and 39.6 ms (128) at an earlier commit. The interpreter keeps
    DS_TILE: fewer, larger steps run faster there.
    dq: "kernel", the separate dQ kernel (bit-reproducible; the only way for fp8 / nvfp4 dS,
    whose scale groups run along keys). "atomic" (dS in bf16, benchmark sweeps) has the dK/dV
    kernel add dQ into an fp32 buffer, so S and dP are computed once: on the H200 it measured the
    same 15.1 ms as the two kernels at S = 8k (the fused program spills more registers), with
    run-dependent fp32 sums, so it is not the default.
    pre (fp8 fast path): the bf16 and row-major copies of `attention_bwd_copies`, so the kernels' loops
    stop converting Q, K and the scaled dO, and transposing V, for every tile that reads them;
    compiled for sm_90 the dK/dV kernel's off-diagonal loop drops from 604 to 409 instructions and
    the dQ kernel's from 345 to 243. On the H200 at S = 8k (72dcfa1, each kernel alone, less the
    copies' time): dK/dV 8.17 → 6.37 ms (5.79 at 3 stages, the default since), dQ 5.59 → 2.46 ms.
    With pre the Triton dK/dV kernel also reads V's rows (VR, VBR) instead of transposing Vᵀ's tiles
    (sm_90 SASS 3344 → 3080 instructions at the fast path's launch, STS 156 → 36, PRMT 112 → 16; spills
    284 / 312 → 288 / 316 bytes), so no kernel of the pre path reads V's token-block copy as Vᵀ bytes,
    and a deferred copy (the autograd backward's) is re-quantized as rows by the copies pass alone.
    dp_early (default True): dP is issued right after S, before the softmax work that does not
    need it, so that work runs while the product is in flight; False issues it after (a sweep option).
    gluon (fast path's default): on sm_90 the dK/dV kernel of `attention_bwd_gluon` (TMA stages, S and
    dP of the next sub-tile in flight during the elementwise work), bit-identical to this one: 5.77
    against 6.20 ms at S = 8k, B×H = 64, copies included (cd5efcf); elsewhere (document masking,
    another launch) the Triton kernel. gluon_dq = 32 (fast path's default): on sm_90 the dQ kernel of
    `attention_bwd_gluon` too (TMA stages of 32 keys, three programs per SM), bit-identical to the Triton
    dQ kernel: 2.728 against 2.895 ms at S = 8k, B×H = 64, copies included (688226c; 2.749 with
    64-key sub-tiles). ws_dkdv (fast path's default): that dK/dV kernel warp-specialized (`attention_dkdv_ws`, a
    TMA producer warp), the same bits: 3848 / 4097 against 4262 / 4355 µs at S = 8k, B×H = 64, two rounds
    (session 15, fa1d110); the dQ kernel stays as it is (a producer warp there would cost it a program per SM:
    ptxas wants a kernel-wide register target of at least 94 for its dQ product, C7602). dq_stream ("high", the fast
    path's default; "same", or None for one stream): the dQ kernel on a side stream of that priority, launched
    beside the dK/dV kernel (both read only what the copies pass wrote), so that its programs take the SMs the dK/dV
    kernel's last programs leave: the same bits, fwd + bwd −1.0 to −1.6% at S = 8k and 16k in paired rounds
    (session 20, e1c8df3; docs/benchmarks.md). ds_out (the fast path's default: a workspace budget in bytes,
    `ds_out_budget`, 0 for off): the ws dK/dV kernel stores each sub-tile's dS·s_k in bf16 and `dq_from_ds` forms dQ
    as one bf16 product over it, in chunks of K / V heads whose buffers fit the budget — S, dP, P and dS are no
    longer computed a second time; the same bits as the dQ kernel (whose side stream it replaces; it runs where one
    head does not fit): fwd + bwd 0.90 → 0.94× cuDNN at 8k, 0.92 → 0.97× at 16k, 0.95 → 1.01× at 32k in the same
    calls on an H100 (session 25, 724cb61; docs/benchmarks.md)."""
    if INTERPRET:
        return {"num_warps": 4, "num_stages": 1, "dq": "kernel"}
    sub = 32 if ds_fmt in ("bf16", "mxfp8") else DS_TILE
    if d == 128 and ds_fmt == "bf16" and not emulated:
        return {"num_warps": 4, "num_stages": 3, "sub": sub, "bn": 64, "dq": "kernel",
                "dq_warps": 4, "dq_stages": 3, "bm": 64, "pre": True, "gluon": True, "ws_dkdv": True, "gluon_dq": 32,
                "dq_stream": "high", "ds_out": ds_out_budget(), "fold_k": FOLD_K}
    if d == 64 and ds_fmt == "bf16" and not emulated and FAST_D64:
        return {"sub": sub, "dq": "kernel", **D64_LAUNCH}
    return {"num_warps": 8, "num_stages": 2, "sub": sub, "dq": "kernel"}


# D = 64 has no Gluon kernels; its Triton kernels over the copies pass's rows (pre) at 4 warps. On the H200 at S = 8k,
# B×H = 4×32 (session 38, each kernel alone): dK/dV 10.80 ms at 8 warps × 2 stages without pre, 7.15 at 4 × 3 with
# it; dQ 15.22 → 7.07 at 4 × 2. With attention_fwd.D64_LAUNCH, fwd+bwd of `fp8` 29.8 → 16.7 ms at 8k (0.29 → 0.52×
# cuDNN). Off (FAST_D64) until the GPU reference tests have passed under it (scripts/launches/d64.json meanwhile).
FAST_D64 = False
D64_LAUNCH = {"pre": True, "num_warps": 4, "num_stages": 3, "dq_warps": 4, "dq_stages": 2}


DQ_MODES = ("kernel", "atomic")
# launch option fold_k's default on the fast path (module-level so that a whole training run can be A/B'd through
# scripts/device/with_constants.py attention_bwd.FOLD_K=False: the same bits either way)
FOLD_K = True
# ...and over the fp8 dS buffer (the `fp8` preset's FP8 dQ product), where the kernel writes K's bytes K-major in the
# buffer's key order instead of bf16 rows (`attention_dkdv_ws._store_k_bytes_t`). The same bits. Written byte by byte
# down D it was slower (session 31: the dK/dV kernel 4070 against 3823 µs for the 142 µs of pass it saved, H100, 8k);
# transposed in the shared-memory read and stored as 16-byte vectors (session 32) the H100's kernels other than the
# forward took 5337 against 5404 µs a call at 8k (three rounds each; 5267 against 5338 in two more).
FOLD_K_T = True
# ...and V's copies with K's (launch option fold_k where V's copy is deferred with its block scales saved): the ws
# dK/dV kernel reads Vᵀ's per-token bytes, transposes them into V's rows in shared memory (`attention_dkdv_ws._v_rows`)
# and re-quantizes those into V's token-block copy (`_fold_v_copy`), so that no key copies pass runs at all. The same
# bits. By the dS buffer's kind, as timed on the H100 at 8k (session 32): over the fp8 buffer (`fp8`, three rounds
# each) V's half of the pass (92 µs) went for +22 µs of dK/dV kernel, the kernels other than the forward 5271 against
# 5337 µs a call; over the bf16 buffer (`fp8-bf16dq`, two rounds each) the kernel took +118 µs (3897 against 3779) for
# the 91 µs of pass, 5955 against 5928 µs: off there.
FOLD_V = {"fp8": True, "bf16": False}
# launch option ds_out's default workspace: the dS buffers of the fast path's backward, at most this many bytes at
# once (S² + 128·S bytes a query head: 78 heads at S = 8k in one chunk, 19 at 16k, 4 at 32k, 1 at 64k; from ~73k on
# no head fits and the dQ kernel runs, with the same bits)
DS_OUT_BUDGET = 5 << 30
DS_OUT_ENV = "FLAMIA_DS_OUT_BYTES"  # the user's override of that budget (0: off, the dQ kernel always)


def ds_out_budget() -> int:
    """ds_out's workspace budget in bytes: DS_OUT_BUDGET, or the environment's FLAMIA_DS_OUT_BYTES (an int >= 0)."""
    raw = os.environ.get(DS_OUT_ENV)
    if raw is None:
        return DS_OUT_BUDGET
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{DS_OUT_ENV}={raw!r}: allowed a byte count, an int >= 0 (0 turns the stored-dS backward "
                         f"off; the default is {DS_OUT_BUDGET})")
    return value


def _fold_rows(v_scale: torch.Tensor, block: int, causal: bool):
    """The V fold's row factors over each forward key tile, for dK/dV programs narrower than it:
    (per query row, the max of s_v over the tile's keys j <= i [B, Hkv, S]; the tile's max
    [B, Hkv, S // block]). Non-causal rows see the whole tile: both are the tile max then."""
    tiles = v_scale.float().reshape(*v_scale.shape[:2], -1, block)
    r_tile = tiles.amax(-1)
    r_diag = tiles.cummax(-1).values if causal else r_tile[..., None].expand_as(tiles)
    return r_diag.reshape(*v_scale.shape[:2], -1).contiguous(), r_tile.contiguous()


def backward(q, k, v, do, lse2, moff, delta, spec, causal: bool, safeguards: bool, sm_scale: float,
             block: int, config: dict | None = None, doc=None, do_l1: torch.Tensor | None = None):
    """dQ [B, Hq, S, D], dK, dV [B, Hkv, S, D] (bf16) from the forward's operands.

    q, k, do: Operands; v: Operand with `vals_t` [B, Hkv, D, S]; k.off / v.off: the token-block
    copies the forward read off the diagonal (`attention_operands.off_diagonal`), or None.
    lse2, moff: the forward's row statistics (reference.pack_stats); delta fp32 [B, Hq, S].
    do_l1 (optional, fp32 [B, Hq, S]): each query's Σ_d |dO8| from dO's pass, for ρ of an FP8 dQ product
    (`dq_row_scale_fast`), which then need not read dO's bytes.
    block: the forward tile (SEQ_BLOCK); the sub-tiles along each product's contraction are
    DS_TILE (dS's scale group). config (benchmark sweeps): num_warps / num_stages, "sub"
    (another sub-tile; only where dS's format has no per-group scale, bf16 or mxfp8), "dq_warps" /
    "dq_stages" / "dq_sub" (the dQ kernel's own launch; the dK/dV kernel's when absent), "bm" (query
    rows per dQ program: the forward's tile, or half of it, so that four warps hold its accumulator
    and two programs share an SM), "which"
    ("dkdv" or "dq" alone), "dq" (DQ_MODES, see `launch_config`), "bn" (keys per dK/dV
    program: the forward's tile, or half of it: compiled for sm_90, 8 warps, it spills nothing where
    the default spills ~240 bytes per thread, scripts/kernel_registers.py, yet on the H200 at S = 8k it
    took 23.2 ms against the default's 14.9: twice the programs each reload and convert every query
    sub-tile, and that per-sub-tile work, not the spills, is what the kernel waits on). doc: None, or
    `document.doc_tables(doc_ids)` as the forward got it. "pre" (the fp8 fast path's default): the
    kernels read `attention_bwd_copies` instead of converting per tile; bit-identical to pre=False.
    k.off and v.off may be ``deferred`` (`attention_operands.OffDiagonal`): pre re-quantizes them within the
    copies, any other launch computes them first (`materialize_off_diagonal`).
    "dp_early": where the dP product is issued (see `launch_config`); bit-identical either way.
    "gluon": the dK/dV kernel of `attention_bwd_gluon` where it applies (sm_90, the fast path's launch), with
    "ws_dkdv" its warp-specialized form (`attention_dkdv_ws`: a TMA producer warp; the same bits);
    "gluon_dq" (0, 32 or 64): its dQ kernel likewise, on key sub-tiles of that many keys (0: off).
    "fp8_dk" (a probe, warp-specialized Gluon dK/dV kernel only): its dK product in FP8 under the keys' bound scales
    (`reference.dk_row_scale`, `reference.backward_math(fp8_dk=True)`) against Q8ᵀ, both computed here in PyTorch
    (a real launch would take ‖dO8‖₁ from dO's pre-pass and Q8ᵀ from the copies pass): other numerics than the spec's.
    "fp8_dq" (default: the spec's dsk == "fp8", as the fp8 preset; True or False otherwise is a probe of
    other numerics than the spec's): dQ as one FP8 product under the queries' bound scales
    (`reference.dq_row_scale`): in the Gluon dQ kernel against K8ᵀ and its token-block copy's bytes K-major
    (computed here in PyTorch), in the Triton dQ kernel (any device, the interpreter too) against K's bytes.
    "ds_fp8" (default: fp8_dq; with ds_out): the dS buffer then holds E4M3(dS·s_k/ρ) (half the bytes) and
    `dq_from_ds` runs that FP8 product against K's bytes K-major from the copies pass (the same numerics; ρ and 1/ρ
    from `dq_row_scale_fast`, one launch). False runs fp8_dq on the dQ kernel. Its first GPU run (session 27, H100,
    a6725e6) gave a NaN dQ; with each key pair's E4M3 bytes packed by one cvt (76c5eff) it matched the reference
    on the H200 (session 28, 0c21fd0), the ws dK/dV kernel costing what its bf16 stores cost.
    "dq_stream" (None, "same" or "high"; see `launch_config`): the dQ kernel on a side stream beside the dK/dV kernel,
    the caller's stream made to wait for it before this returns; the same bits.
    "ds_chunks" (default 1; with ds_out): n >= 2 splits the K / V heads into at least n chunks in two dS buffers of
    at most half the budget each, used in turn, and runs each chunk's `dq_from_ds` on a high-priority side stream
    beside the next chunk's dK/dV kernel (`_dkdv_and_dq_from_ds`): the same launches, the same bits. Built in session
    29 on the idea that a memory-bound kernel hides beside one bound by its products; timed in session 30 on an H100
    it made fwd + bwd 2–4% slower at 8k / 16k (a `dq_from_ds` program takes a dK/dV program's place on its SM).
    "fold_k" (the fast path's default; where ds_out runs with K's copy deferred and its block scales saved, as the
    autograd backward gives them): the ws dK/dV kernel writes K's copies for `dq_from_ds` (KBF, KBBF: bf16 rows over
    a bf16 buffer; over the fp8 one, where FOLD_K_T is set (the default), K's E4M3 bytes K-major) and re-quantizes
    K's token-block copy from the per-token rows it already holds in shared memory, so the copies pass skips K's half
    (bf16: 111 µs at 8k on the H200, 142 on an H100: it read K8 and wrote KB8, KBF and KBBF); the same bits. Session
    30, H100, 8k: ~−110 µs of kernels a call (docs/benchmarks.md, calls 4 and 6). With FOLD_V (over the fp8 buffer,
    the default) and V's block scales saved too, the kernel also makes V's rows from Vᵀ's bytes and its token-block
    copy, and no key copies pass runs (session 32: −66 µs a call more on an H100 at 8k).
    """
    b, hq, seq, d = q.vals.shape
    hkv = k.vals.shape[1]
    dk = torch.empty(b, hkv, seq, d, dtype=torch.bfloat16, device=q.vals.device)
    dv = torch.empty_like(dk)
    defaults = launch_config(d, spec.ds, spec.emulated)
    if doc is not None:  # half-tile dK/dV programs cannot see the fold's row factor across documents
        defaults.pop("bn", None)
    chosen = config is not None  # a caller's launch is checked; the defaults drop what these operands cannot take
    config = dict(config or defaults)
    sub, which = config.pop("sub", DS_TILE), config.pop("which", "both")
    dq_mode = config.pop("dq", defaults["dq"])
    pre = config.pop("pre", False)
    if pre and not chosen and not pre_eligible(q, k, v, do, spec):
        pre = False  # e.g. a bf16 P·V: the copies serve FP8 dV products only
    if not pre:  # the token-block copies as the kernels read them without the copies pass (V's: [D, S] bytes)
        k, v = materialize_off_diagonal(k, QZ), materialize_off_diagonal(v, QZ)
    dp_early = config.pop("dp_early", True)
    gluon = config.pop("gluon", False)
    ws_dkdv = config.pop("ws_dkdv", False)
    gluon_dq = config.pop("gluon_dq", 0)
    fp8_dk = config.pop("fp8_dk", False)
    fp8_dq = config.pop("fp8_dq", spec.dsk == "fp8")  # the spec's dQ product unless a probe asks otherwise
    dq_stream = config.pop("dq_stream", None)
    ds_out = config.pop("ds_out", 0)
    ds_chunks = config.pop("ds_chunks", 1)
    fold_k = config.pop("fold_k", False)
    if not isinstance(fold_k, bool):
        raise ValueError(f"backward config fold_k={fold_k!r}: allowed True (K's backward copies made by the ws dK/dV "
                         f"kernel where ds_out runs: over a bf16 buffer, or an fp8 one with FOLD_K_T) or False (by the "
                         f"copies pass)")
    if not isinstance(fp8_dq, bool):
        raise ValueError(f"backward config fp8_dq={fp8_dq!r}: allowed True (dQ as an FP8 product under per-query "
                         f"bound scales) or False (dS in the spec's ds format); default: the spec's dsk ({spec.dsk})")
    ds_fp8 = config.pop("ds_fp8", fp8_dq)
    if not isinstance(ds_fp8, bool) or (ds_fp8 and not fp8_dq):
        raise ValueError(f"backward config ds_fp8={ds_fp8!r} (fp8_dq={fp8_dq!r}): allowed True only together with "
                         f"fp8_dq=True (the dS buffer in E4M3 under fp8_dq's per-query scales), else False")
    if isinstance(ds_out, bool) or not isinstance(ds_out, int) or ds_out < 0:
        raise ValueError(f"backward config ds_out={ds_out!r}: allowed a workspace budget in bytes (an int >= 0; 0: "
                         f"off)")
    if isinstance(ds_chunks, bool) or not isinstance(ds_chunks, int) or ds_chunks < 1:
        raise ValueError(f"backward config ds_chunks={ds_chunks!r}: allowed an int >= 1 (1: the chunks the ds_out "
                         f"budget needs, one after the other; n >= 2: at least n chunks in two buffers, each chunk's "
                         f"dQ beside the next chunk's dK/dV kernel)")
    if fp8_dq and (dq_mode == "atomic" or not (spec.qk == "fp8" and spec.fp8_dv and spec.ds == "bf16")):
        raise ValueError(f"backward config fp8_dq=True: the dQ product in FP8 under bound scales needs fp8 qk, pv and "
                         f"do with ds=bf16 (the spec is {spec}) and dq='kernel' (dq={dq_mode!r})")
    if dq_stream not in (None, "same", "high"):  # checked before any launch
        raise ValueError(f"backward config dq_stream={dq_stream!r}: allowed None, 'same' or 'high' (the dQ kernel on a "
                         f"side stream of that priority, beside the dK/dV kernel)")
    if gluon_dq not in (0, 32, 64):
        raise ValueError(f"backward config gluon_dq={gluon_dq!r}: allowed 0 (the Triton dQ kernel), 32 or 64 (the "
                         f"Gluon dQ kernel's key sub-tile)")
    if pre and not pre_eligible(q, k, v, do, spec):
        raise ValueError(f"backward config pre=True needs fp8 Q, K, V and dO with pv=fp8 and ds=bf16, the spec is "
                         f"{spec}; use pre=False")
    bn = config.pop("bn", block)
    # the dQ kernel's own launch where it has one, else the dK/dV kernel's
    dq_sub = config.pop("dq_sub", sub)
    bm = config.pop("bm", block)  # query rows per dQ program
    dq_launch = {key: config.pop(dq_key) for key, dq_key in (("num_warps", "dq_warps"), ("num_stages", "dq_stages"))
                 if dq_key in config}
    for name, rows, least, what in (("bm", bm, dq_sub, "dQ sub-tile"), ("bn", bn, sub, "sub-tile")):
        if rows not in (block, block // 2) or rows < least:
            raise ValueError(f"backward config {name}={rows}: allowed {block} (the forward's tile) or {block // 2}, "
                             f"and at least the {what} ({least})")
    if bn != block and doc is not None:
        raise ValueError(f"backward config bn={bn} with document masking: the fold's row factor then depends "
                         f"on the documents; use bn={block}")
    for name, value in (("sub", sub), ("dq_sub", dq_sub)):
        if value != DS_TILE and spec.ds in ("fp8", "nvfp4"):
            raise ValueError(f"backward config {name}={value}: dS format {spec.ds} fixes the backward sub-tile "
                             f"at DS_TILE = {DS_TILE}")
        if value not in (16, 32, 64, 128) or value > block:
            raise ValueError(f"backward config {name}={value}: allowed 16, 32, 64 or 128, at most the tile ({block})")
    if dq_mode not in DQ_MODES:
        raise ValueError(f"backward config dq={dq_mode!r}: allowed {', '.join(DQ_MODES)}")
    if dq_mode == "atomic" and spec.ds != "bf16":
        raise ValueError(f"backward config dq={dq_mode!r} needs dS in bf16, the spec has ds={spec.ds}: its scale "
                         f"groups run along keys, across the dK/dV kernel's key tile; use dq='kernel'")
    if dq_mode == "atomic" and torch.are_deterministic_algorithms_enabled():
        raise RuntimeError("backward config dq='atomic' sums dQ with atomics in a run-dependent order and "
                           "torch.use_deterministic_algorithms(True) is set; use dq='kernel'")
    fuse = dq_mode == "atomic"
    # fp32 sums of every key tile's dQ rows (zeros: each tile adds into them)
    dqa = torch.zeros(b, hq, seq, d, dtype=torch.float32, device=q.vals.device) if fuse else dk
    common = dict(D=d, DS_FMT=fmt_code(spec.ds), CAUSAL=causal, TINY=FP8_TINY, INTERP=INTERPRET,
                  HAS_DOC=doc is not None, K_OFF=k.off is not None, V_OFF=v.off is not None)
    doc_ptrs = doc if doc is not None else (moff, moff, moff)  # unread without HAS_DOC
    on_gluon = gluon and attention_bwd_gluon.eligible(
        q, k, v, spec, causal, doc, {"pre": pre, "bn": bn, "sub": sub, "dq": dq_mode}) is None
    # where it applies (the ws Gluon dK/dV kernel computing dK, dV and dQ, not the FP8 dK probe): K / V heads per
    # dS buffer and the buffer; none: the dQ kernel instead. With fp8_dq the buffer is fp8 (ds_fp8, else none) and
    # the copies pass writes K's bytes K-major (the FP8 dQ product's operand) in place of its bf16 copies.
    ds_heads = (ds_out_heads(ds_out, hq // hkv, seq, fp8_dq)
                if on_gluon and ws_dkdv and which == "both" and not fp8_dk and dq_mode == "kernel"
                and ds_fp8 == fp8_dq else 0)
    ds_buf = None
    if ds_heads:
        # ds_chunks >= 2: two buffers under the budget, at least that many chunks (`_dkdv_and_dq_from_ds`)
        paired = ds_chunks > 1 and ds_heads >= 2 and b * hkv >= 2
        if paired:
            ds_heads = min(ds_heads // 2, -(-b * hkv // ds_chunks))
        ds_heads = even_chunk(ds_heads, b * hkv)
        ds_buf = [ds_workspace(ds_heads * (hq // hkv), seq, q.vals.device, fp8_dq) for _ in range(1 + paired)]
        ds_buf = None if any(x is None for x in ds_buf) else ds_buf
        ds_heads = ds_heads if ds_buf is not None else 0
    stats = query_stats(q) if on_gluon and which != "dq" else None  # the Gluon dK/dV kernel's TMA source
    # fold_k where it applies: the dS buffer's backward (bf16, or fp8 with K's bytes K-major) with K's copy deferred
    # and its block scales saved
    fold_k = fold_k and pre and bool(ds_heads) and deferred_with_scales(k) and (FOLD_K_T or not fp8_dq)
    if pre:
        fold_v = fold_k and FOLD_V["fp8" if fp8_dq else "bf16"] and deferred_with_scales(v)
        qb, kbf, kbbf, vr, vbr, vbs, kb, kbs = bf16_copies(q, k, v, do, lse2, moff, delta, stats,
                                                           k_t=bool(ds_heads) and fp8_dq, fold_k=fold_k,
                                                           fold_v=fold_v)
        if v.off is not None and v.off.deferred:  # its block scales from the copies; its Vᵀ bytes never exist
            v = replace(v, off=replace(v.off, scale=vbs))
        if k.off is not None and k.off.deferred and not fold_k:  # re-quantized by the copies
            k = replace(k, off=replace(k.off, vals=kb, scale=kbs))
    else:
        qb = kbf = kbbf = vr = vbr = moff  # unread without PRE
        fold_v = False
    # FP8 dV (`AttentionSpec.fp8_dv`): dO's bytes K-major (from its pre-pass, else transposed here) and each key's
    # row scale τ
    fp8_dv = spec.fp8_dv
    if fp8_dv:
        dot = do.vals_t if do.vals_t is not None else do.vals.transpose(-1, -2).contiguous()
        tau = dv_row_scale_fast(do.scale, hkv, causal, None if doc is None else doc[0])
    else:
        dot = tau = moff  # unread
    k_off = (k.off.vals, k.off.scale) if k.off is not None else (k.vals, k.scale)  # unread without K_OFF
    # V_OFF: VBT is unread with PRE (both kernels read VBR), and absent where the copy was deferred
    v_off = ((v.vals_t if v.off.deferred else v.off.vals, v.off.scale) if v.off is not None
             else (v.vals_t, v.scale))  # unread without V_OFF
    args = (q.vals, q.scale, k.vals, k.scale, *k_off, v.vals_t, v.scale, *v_off, do.vals, do.scale, lse2, moff,
            delta, *doc_ptrs)
    qk_scale = sm_scale * 1.4426950408889634
    scalars = (qk_scale, sm_scale, p_global_value(), seq, hq // hkv, hkv)
    # the fold's row factors: read by Triton programs narrower than the tile where dV folds V's scale into P
    r_diag, r_tile = _fold_rows(v.scale, block, causal) if bn != block and not fp8_dv else (moff, moff)
    if fp8_dk and not (on_gluon and ws_dkdv and which != "dq"):
        raise ValueError("backward config fp8_dk=True: the warp-specialized Gluon dK/dV kernel only (sm_90, the fp8 "
                         "fast path's launch with ws_dkdv)")
    # fp8_dq's probe computes the dQ kernel's operands on this stream after this point: one stream then; ds_out's dQ
    # product reads what the dK/dV kernel wrote
    side = (_side_stream(q.vals.device, dq_stream)
            if dq_stream and q.vals.is_cuda and which == "both" and not fp8_dq and not ds_heads else None)
    if side is not None:  # dQ's inputs are queued: from here the side stream may run beside the dK/dV kernel
        side.wait_stream(torch.cuda.current_stream())
    if on_gluon and which != "dq":
        copies = (qb, dot, kbf, kbbf, vr, vbr)
        if ws_dkdv:
            probe = None
            if fp8_dk:
                rho = dk_row_scale(q.scale, do, delta, unpack_stats(lse2, moff)[1], v.scale, v.off.per_token_scale(),
                                   causal, block)
                probe = (q.vals.transpose(-1, -2).contiguous(), rho)
            if ds_heads:
                # with fp8_dq the buffer in E4M3 under ρ (1/ρ in the statistics the dK/dV kernel copies) and copies'
                # KBF, KBBF K's bytes K-major (`bf16_copies(k_t=True)`)
                rho = (dq_row_scale_fast(do, k, v, stats, attention_bwd_gluon.DS_IRHO_ROW, causal, do_l1=do_l1)
                       if fp8_dq else None)
                overlap = _side_stream(q.vals.device, "high") if len(ds_buf) > 1 and q.vals.is_cuda else None
                dq = _dkdv_and_dq_from_ds(q, k, v, do, copies, stats, tau, sm_scale, ds_buf, ds_heads, (dk, dv), rho,
                                          overlap, fold_k, fold_v)
                ds_buf = None  # the workspace goes back to the allocator now, not when this function returns
            else:
                dk, dv = attention_dkdv_ws.dkdv(q, k, v, do, copies, stats, tau, sm_scale, fp8_dk=probe)
        else:
            dk, dv = attention_bwd_gluon.dkdv(q, k, v, do, copies, stats, tau, sm_scale)
    elif which != "dq" or fuse:
        _dkdv_kernel[(seq // bn, b * hkv)](*args, dk, dv, dqa, r_diag, r_tile, qb, dot, tau, vr, vbr, *scalars, BN=bn,
                                           BM=sub, PV_FMT=fmt_code(spec.pv), SAFE=safeguards, FUSE_DQ=fuse, TB=block,
                                           R_PRE=bn != block, PRE=pre, DP_EARLY=dp_early, FP8_DV=fp8_dv, **common,
                                           **config)
    if fuse:
        dq = dqa.mul_(sm_scale).to(torch.bfloat16)  # the dQ kernel's to_bf16(dq · sm_scale): RNE
    elif ds_heads:
        pass  # dQ came with dK and dV
    else:
        dq_on_gluon = gluon_dq and attention_bwd_gluon.dq_eligible(
            q, k, v, spec, causal, doc, {"pre": pre, "bm": bm, "dq": dq_mode}) is None
        rho = None
        if fp8_dq and which != "dkdv":  # ρ per query (`reference.dq_row_scale`), for either dQ kernel
            rho = dq_row_scale(do, delta, unpack_stats(lse2, moff)[1], k.scale,
                               None if k.off is None else k.off.per_token_scale(), v.scale,
                               None if v.off is None else v.off.per_token_scale(), causal, block,
                               None if doc is None else doc[0])
        if which != "dkdv" and dq_on_gluon:  # it allocates its own output
            probe = None
            if fp8_dq:
                probe = tuple(x.transpose(-1, -2).contiguous() for x in (k.vals, k.off.vals)) + (rho,)
            with torch.cuda.stream(side):  # a no-op for None
                dq = attention_bwd_gluon.dq(q, k, v, do, lse2, moff, delta, (qb, dot, kbf, kbbf, vr, vbr), sm_scale,
                                            gluon_dq, fp8_dq=probe)
        else:
            dq = torch.empty(b, hq, seq, d, dtype=torch.bfloat16, device=q.vals.device)
            if which != "dkdv":
                _dq_kernel[(seq // bm, b * hq)](*args, dq, kbf, kbbf, vr, vbr, *scalars, BM=bm, BN=dq_sub, TB=block,
                                                PRE=pre, DP_EARLY=dp_early, FP8_DQ=fp8_dq,
                                                RHO=rho if fp8_dq else moff, **common, **{**config, **dq_launch})
    if side is not None:  # the caller's stream waits for dQ; dQ's memory is released on the caller's stream
        torch.cuda.current_stream().wait_stream(side)
        dq.record_stream(torch.cuda.current_stream())
    return dq, dk, dv


def ds_out_heads(budget: int, group: int, seq: int, fp8: bool = False) -> int:
    """K / V heads whose dS buffers (`attention_bwd_gluon.ds_buffer`, `group` query heads each, fp8 with fp8_dq) fit
    `budget` bytes (launch option ds_out); 0 where not even one does (the backward then runs the dQ kernel: the same
    bits)."""
    return budget // (group * attention_bwd_gluon.ds_buffer_bytes(seq, fp8))


def even_chunk(most: int, total: int) -> int:
    """Items per chunk when `total` items go in chunks of at most `most`: as many chunks as that needs, of even size,
    so that no chunk is a short tail (a launch's tail of idle SMs)."""
    chunks = -(-total // most)
    return -(-total // chunks)


_DS_WORKSPACE_WARNED: set = set()


def ds_workspace(heads: int, seq: int, device, fp8: bool = False) -> torch.Tensor | None:
    """The dS buffer of `heads` query heads (launch option ds_out; fp8 with fp8_dq), or None where the device has no
    memory left for it: the backward then runs the dQ kernel (the same gradients, slower) and says so once per size."""
    try:
        return attention_bwd_gluon.ds_buffer(1, heads, seq, device, fp8)
    except torch.OutOfMemoryError:
        nbytes = heads * attention_bwd_gluon.ds_buffer_bytes(seq, fp8)
        if nbytes not in _DS_WORKSPACE_WARNED:
            _DS_WORKSPACE_WARNED.add(nbytes)
            warnings.warn(f"flamia_kernels: no device memory for the attention backward's dS workspace ({nbytes} "
                          f"bytes): the dQ kernel runs instead (the same gradients, slower). {DS_OUT_ENV} sets a "
                          f"smaller budget (0: off).", stacklevel=2)
        return None


def _dkdv_and_dq_from_ds(q, k, v, do, copies, stats, tau, sm_scale: float, bufs, heads: int, out, rho=None,
                         side=None, fold_k: bool = False, fold_v: bool = False):
    """dK and dV into `out` and dQ (returned) by launch option ds_out: per chunk of `heads` K / V heads (of B·Hkv),
    the ws dK/dV kernel fills a dS buffer of `bufs` (`ds_workspace`, used in turn) and `dq_from_ds` reads it. One
    buffer: the two one after the other on this stream, so the buffer never holds more than the budget. Two (launch
    option ds_chunks) with `side` (a CUDA stream): each chunk's `dq_from_ds` runs on `side` once its dK/dV kernel is
    done, beside the next chunk's dK/dV kernel on this stream — a memory-bound kernel next to one bound by its
    products — and a chunk's dK/dV kernel waits for the `dq_from_ds` that last read its buffer; this stream waits
    for `side` before returning. The same launches with the same inputs, so the same bits. rho (an fp8 buffer, with
    fp8_dq): the queries' scales of `dq_from_ds`' FP8 product, whose K operands copies' KBF, KBBF then are.
    fold_k: each chunk's dK/dV kernel writes its heads' KBF, KBBF (`attention_dkdv_ws.dkdv(fold_k=True)`) before
    that chunk's `dq_from_ds` reads them. fold_v: and V's rows and copy (`attention_dkdv_ws.dkdv(fold_v=True)`)."""
    b, hq, seq, d = q.vals.shape
    hkv = k.vals.shape[1]
    g = hq // hkv
    dq = torch.empty(b, hq, seq, d, dtype=torch.bfloat16, device=q.vals.device)
    main = torch.cuda.current_stream() if side is not None else None
    read = [None] * len(bufs)  # per buffer: the event after the last dq_from_ds that read it
    for i, h0 in enumerate(range(0, b * hkv, heads)):
        kv = range(h0, min(h0 + heads, b * hkv))
        slot = i % len(bufs)
        if read[slot] is not None:
            main.wait_event(read[slot])
        attention_dkdv_ws.dkdv(q, k, v, do, copies, stats, tau, sm_scale, ds_out=bufs[slot], heads=kv, out=out,
                               fold_k=fold_k, fold_v=fold_v)
        if side is not None:
            side.wait_stream(main)
        with torch.cuda.stream(side):  # a no-op for None
            dq_from_ds(bufs[slot], copies[2], copies[3], b, hq, seq, sm_scale, heads=range(kv.start * g, kv.stop * g),
                       out=dq, rho=rho)
        if side is not None:
            read[slot] = torch.cuda.Event()
            read[slot].record(side)
    if side is not None:  # dQ and everything side read are the caller's stream's again
        main.wait_stream(side)
    return dq


_SIDE_STREAMS: dict = {}


def _side_stream(device, priority: str):
    """A side stream per device and priority (launch option dq_stream): the dQ kernel there, launched after the
    dK/dV kernel, may take the SMs the dK/dV kernel's last programs leave (at high priority the block scheduler
    dispatches its programs first wherever an SM frees up). Kept for the process: a stream is created once."""
    key = (device, priority)
    if key not in _SIDE_STREAMS:
        _SIDE_STREAMS[key] = torch.cuda.Stream(device, priority=-1 if priority == "high" else 0)
    return _SIDE_STREAMS[key]

