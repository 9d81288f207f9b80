"""FLAMIA forward kernel (Triton): causal flash attention on quantized Q, K, V.

One program = one BLOCK of query rows of one (batch, query head); it walks the
key tiles left of the diagonal, then the diagonal tile with the causal mask.
Per tile (log2 units; the math is written out in `reference`):

    S = dot(Q8, K8ᵀ) · (s_q·c ⊗ s_k)      FP8 (or bf16-exact emulated) operands, scales folded
    M = max(M, ceil(rowmax S))              integer max: every rescale is a power of two, so the
                                            P bytes match a recompute from the final M
    p = exp2(S - M);  l = l·α + Σp
    x = p · s_v[j] / r_i  (r_i = max s_v over the tile's keys <= i: V's per-token scale folded
                           into P, the partner-folding rule, chosen after masking)
    acc = acc·α + dot(P8, V8) · r_i / 256  (fresh product per tile: r_i differs per tile)

Document masking (DOC): every tile ANDs "same document" into its mask (the causal one on the
diagonal), r_i is the max over the keys row i sees, and a row that sees no key of a tile yet
(its document starts later) keeps M = -inf with exp2 taken against 0, so it adds exact zeros.
A program starts at the key tile holding its first row's document start: every earlier tile
is masked for all its rows, so skipping it changes no bit.

Vᵀ is read K-major ([D, S] in memory) as Hopper's FP8 wgmma needs. The
epilogue writes O (bf16), the row statistics M and l for the backward, and
optionally O's per-token fp8 bytes (the saved copy; see attention_operands).
"""
from __future__ import annotations

import torch

from ._triton_env import HAS_TRITON, INTERPRET
from .attention_quant import fmt_code, p_global_value
from .formats import FP8_TINY

if HAS_TRITON:
    import triton
    import triton.language as tl

    from .attention_quant import fp8_row_bytes, mma, p_fp8, quant_rows, to_bf16

    @triton.jit
    def _fwd_tile(acc, m_i, l_i, q, qs, K, KS, VT, VS, kv_off, kvs_off, start, offs_m, offs_d, S, P_GLOB,
                  qdoc, DOC, doc_off, D: tl.constexpr, BLOCK: tl.constexpr, PV_FMT: tl.constexpr,
                  DIAG: tl.constexpr, SAFE: tl.constexpr, HAS_DOC: tl.constexpr, TINY: tl.constexpr,
                  INTERP: tl.constexpr, ABLATE: tl.constexpr):
        cols = start + tl.arange(0, BLOCK)
        k = tl.load(K + kv_off + cols[:, None] * D + offs_d[None, :])  # (BLOCK, D)
        ks = tl.load(KS + kvs_off + cols)
        vs = tl.load(VS + kvs_off + cols)
        if ABLATE & 1:  # profiling only (wrong numbers): no per-key K scale
            s = mma(q, tl.trans(k), INTERP) * qs[:, None]
        else:
            s = mma(q, tl.trans(k), INTERP) * (qs[:, None] * ks[None, :])  # (BM, BN), log2 units
        if HAS_DOC:  # block-diagonal: same document (and j <= i on the diagonal)
            keep = qdoc[:, None] == tl.load(DOC + doc_off + cols)[None, :]
            if DIAG:
                keep = keep & (offs_m[:, None] >= cols[None, :])
            s = tl.where(keep, s, float("-inf"))
            if SAFE:  # V-scale max over the keys row i sees (1 where it sees none: P is 0 there)
                r = tl.max(tl.where(keep, vs[None, :], 0.0), 1)
                r = tl.where(r > 0.0, r, 1.0)
            else:  # leaky: the whole tile, future keys and other documents included
                r = tl.zeros([BLOCK], tl.float32) + tl.max(vs, 0)
        elif DIAG:
            keep = offs_m[:, None] >= cols[None, :]
            s = tl.where(keep, s, float("-inf"))
            if SAFE:  # V-scale max over keys <= i only: the causally safe choice
                r = tl.max(tl.where(keep, vs[None, :], 0.0), 1)
            else:  # leaky: the whole tile, future keys included
                r = tl.zeros([BLOCK], tl.float32) + tl.max(vs, 0)
        else:
            r = tl.zeros([BLOCK], tl.float32) + tl.max(vs, 0)
        if ABLATE & 4:  # profiling only: no integer snap of the row max
            m_new = tl.maximum(m_i, tl.max(s, 1))
        else:
            m_new = tl.maximum(m_i, tl.ceil(tl.max(s, 1)))
        if HAS_DOC:  # a row that has seen no key yet stays at -inf; exp2 against 0 gives exact zeros
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_use = m_new
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if ABLATE & 2:  # profiling only (wrong numbers): V's scale not folded into P
            x = p
        else:
            x = p * vs[None, :] * tl.math.div_rn(tl.full([BLOCK], 1.0, tl.float32), r)[:, None]  # in [0, 1]
        vt = tl.load(VT + kv_off + offs_d[:, None] * S + cols[None, :])  # (D, BN): Vᵀ, K-major
        if PV_FMT == 1:  # the fast path: P8 = x·256 in E4M3, an FP8 x FP8 product
            if ABLATE & 8:  # profiling only: one accumulation chain, no per-tile factor
                p8 = p_fp8(x, INTERP)
                acc = tl.dot(p8, tl.trans(vt).to(p8.dtype), acc * alpha[:, None])
            else:
                pv = mma(p_fp8(x, INTERP), tl.trans(vt), INTERP)
                acc = acc * alpha[:, None] + pv * (r * (1.0 / 256.0))[:, None]
        else:  # bf16, or MXFP8 / NVFP4 emulated: exact dequantized values in a bf16 product
            xq, prs = quant_rows(x, P_GLOB, PV_FMT, True, BLOCK, BLOCK, TINY, INTERP)
            pv = mma(xq.to(tl.bfloat16), tl.trans(vt).to(tl.bfloat16), INTERP)
            acc = acc * alpha[:, None] + pv * (r * prs)[:, None]
        return acc, m_new, l_i

    @triton.jit
    def _fwd_kernel(Q, QS, K, KS, VT, VS, O, O8, OS, LSE2, MOFF, DOC, DSTART, DEND, qk_scale, P_GLOB, S, G,
                    HKV, D: tl.constexpr, BLOCK: tl.constexpr, PV_FMT: tl.constexpr, CAUSAL: tl.constexpr,
                    SAFE: tl.constexpr, SAVE_O8: tl.constexpr, TINY: tl.constexpr, INTERP: tl.constexpr,
                    HAS_DOC: tl.constexpr = False, ABLATE: tl.constexpr = 0):
        pid_m = tl.program_id(0)
        bh = tl.program_id(1).to(tl.int64)  # b * Hq + h
        bhk = bh // G  # b * Hkv + h // G: the shared K/V head (GQA)
        offs_m = pid_m * BLOCK + tl.arange(0, BLOCK)
        offs_d = tl.arange(0, D)
        q_off = bh * S * D
        kv_off = bhk * S * D
        rows = q_off + offs_m[:, None] * D + offs_d[None, :]
        q = tl.load(Q + rows)
        qs = tl.load(QS + bh * S + offs_m) * qk_scale
        m_i = tl.full([BLOCK], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK], tl.float32)
        acc = tl.zeros([BLOCK, D], tl.float32)
        doc_off = (bhk // HKV) * S  # the batch row's doc ids
        if CAUSAL:
            hi = pid_m * BLOCK
        else:
            hi = S
        if HAS_DOC:  # key tiles wholly before the first row's document are masked for every row: skip
            qdoc = tl.load(DOC + doc_off + offs_m)
            lo = tl.load(DSTART + doc_off + pid_m * BLOCK) // BLOCK * BLOCK
            if not CAUSAL:  # and those wholly after the last row's document
                hi = (tl.load(DEND + doc_off + pid_m * BLOCK + BLOCK - 1) + BLOCK - 1) // BLOCK * BLOCK
        else:
            qdoc = offs_m
            lo = 0
        for start in range(lo, hi, BLOCK):
            acc, m_i, l_i = _fwd_tile(acc, m_i, l_i, q, qs, K, KS, VT, VS, kv_off, bhk * S, start, offs_m,
                                      offs_d, S, P_GLOB, qdoc, DOC, doc_off, D, BLOCK, PV_FMT, False, SAFE,
                                      HAS_DOC, TINY, INTERP, ABLATE)
        if CAUSAL:
            acc, m_i, l_i = _fwd_tile(acc, m_i, l_i, q, qs, K, KS, VT, VS, kv_off, bhk * S, pid_m * BLOCK,
                                      offs_m, offs_d, S, P_GLOB, qdoc, DOC, doc_off, D, BLOCK, PV_FMT, True,
                                      SAFE, HAS_DOC, TINY, INTERP, ABLATE)
        o = to_bf16(acc / l_i[:, None], INTERP)
        tl.store(O + rows, o)
        lse2 = m_i + tl.log2(l_i)  # saved as lse2 and int8 floor(lse2) - M (reference.pack_stats)
        tl.store(LSE2 + bh * S + offs_m, lse2)
        tl.store(MOFF + bh * S + offs_m, (tl.floor(lse2) - m_i).to(tl.int8))
        if SAVE_O8:  # the backward's copy of O, fused: formats.quantize_fp8_per_token of the bf16 O
            o8, os = fp8_row_bytes(o.to(tl.float32), BLOCK, D, TINY)
            tl.store(O8 + rows, o8)
            tl.store(OS + bh * S + offs_m, os)


def launch_config(d: int, emulated: bool) -> dict:
    """num_warps / num_stages: 128×128 tiles, 8 warps, 3 stages on sm_90 (FLAMIA.md); the
    emulated formats hold wider register tiles, so they pipeline one stage less."""
    if INTERPRET:
        return {"num_warps": 4, "num_stages": 1}
    return {"num_warps": 8, "num_stages": 2 if emulated else 3}


def forward(q, k, vt, spec, causal: bool, safeguards: bool, sm_scale: float, block: int, save_o8: bool,
            config: dict | None = None, doc=None):
    """Run the forward kernel.

    q, k: Operands [B, Hq|Hkv, S, D]; vt: (values [B, Hkv, D, S], scale [B, Hkv, S]).
    doc: None, or `document.doc_tables(doc_ids)` (index, start, end int32 [B, S]): document masking.
    config: num_warps / num_stages override, and ABLATE (bits 1: no K scale, 2: no V fold, 4: no
    integer max, 8: chained P·V accumulation; wrong numbers, for the benchmark's time profile only).
    Returns (O bf16 [B, Hq, S, D], lse2 fp32 [B, Hq, S], M offset int8 [B, Hq, S],
    o8 fp8 or None, o_scale or None); see reference.pack_stats for the row statistics.
    """
    b, hq, seq, d = q.vals.shape
    group = hq // k.vals.shape[1]
    vt_vals, v_scale = vt
    o = torch.empty(b, hq, seq, d, dtype=torch.bfloat16, device=q.vals.device)
    lse2 = torch.empty(b, hq, seq, dtype=torch.float32, device=q.vals.device)
    moff = torch.empty(b, hq, seq, dtype=torch.int8, device=q.vals.device)
    o8 = torch.empty(o.shape, dtype=torch.uint8, device=o.device) if save_o8 else o
    o_scale = torch.empty_like(lse2) if save_o8 else lse2
    pv = fmt_code(spec.pv)
    doc_ptrs = doc if doc is not None else (moff, moff, moff)  # unread without HAS_DOC
    _fwd_kernel[(seq // block, b * hq)](
        q.vals, q.scale, k.vals, k.scale, vt_vals, v_scale, o, o8, o_scale, lse2, moff, *doc_ptrs,
        sm_scale * 1.4426950408889634, p_global_value(), seq, group, k.vals.shape[1],
        D=d, BLOCK=block, PV_FMT=pv, CAUSAL=causal, SAFE=safeguards, SAVE_O8=save_o8, TINY=FP8_TINY,
        INTERP=INTERPRET, HAS_DOC=doc is not None,
        **(config or launch_config(d, spec.emulated)),
    )
    if not save_o8:
        return o, lse2, moff, None, None
    return o, lse2, moff, o8.view(torch.float8_e4m3fn), o_scale
