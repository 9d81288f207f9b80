"""FLAMIA forward kernel (Triton): causal flash attention on quantized Q, K, V.

One program = one BLOCK of query rows of one (batch, query head); the heaviest query
blocks start first (causal work grows with the block index). It walks the key tiles left
of the diagonal, then the diagonal tile with the causal mask. Per tile (log2 units;
the math is written out in `reference`):

    S = dot(Q8, K8ᵀ) · (s_q·c ⊗ s_k)      FP8 (or bf16-exact emulated) operands, scales folded
    M = max(M, ceil(rowmax S))              integer max: every rescale is a power of two, so the
                                            P bytes match a recompute from the final M
    p = exp2(S - M + 8);  l = l·α + Σp      P's fixed ×256 fp8 scale rides in the exponent
    acc = acc·α + dot(P8, V8) · s_v         P8 = E4M3(p), or p with V's scale folded in

Two copies of the key-side operands (FLAMIA.md, token-block scaling). Off the diagonal,
every key of a tile precedes every query of the block, so K and V may share one scale
per tile (`K_OFF`, `V_OFF`: token-block fp8 bytes re-quantized from the per-token ones):
the K scale is then one factor per row, fused with Q's into one FMA before exp2, and the
V scale one factor per tile, carried in the accumulator's unit (`cv`) so the P·V products
can chain in one accumulator (CHAIN; off by default: a fresh product per tile measured
as fast, 2.02 vs 2.04 ms at S=8k, D=128 on the H200, and keeps each FP8 sum short).
On the diagonal tile the per-token copies are read: S's scales are an outer product,
and V's per-token scale is folded into P (the partner-folding rule) as
x = p · s_v[j] / r_i with r_i = max s_v over the keys <= i, the causally safe choice.
Operands without a token-block copy (MXFP8 / NVFP4 emulated, bf16) take that per-token
path on every tile, with r over the whole tile off the diagonal.

Document masking (DOC): every tile ANDs "same document" into its mask (the causal one on the
diagonal), r_i is the max over the keys row i sees, and a row that sees no key of a tile yet
(its document starts later) keeps M = -inf with exp2 taken against 0, so it adds exact zeros.
A program starts at the key tile holding its first row's document start: every earlier tile
is masked for all its rows, so skipping it changes no bit.

Vᵀ is read K-major ([D, S] in memory) as Hopper's FP8 wgmma needs. The epilogue writes O
(bf16), the row statistics M and l for the backward, and optionally O's per-token fp8 bytes
(the saved copy; see attention_operands).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import attention_fwd_gluon, attention_fwd_ws
from ._triton_env import HAS_TRITON, INTERPRET, device_capability
from .attention_quant import fmt_code, p_global_value
from .buffers import carve
from .formats import FP8_TINY

if HAS_TRITON:
    import triton
    import triton.language as tl

    from .attention_quant import finite_row_max, fp8_row_bytes, mma, p_fp8_scaled, quant_rows, to_bf16

    @triton.jit
    def _key_rows(P, off, start, offs_d, S, D: tl.constexpr, BLOCK: tl.constexpr, BPTR: tl.constexpr):
        """The [BLOCK, D] rows start.. of a row-major [S, D] slice at P + off (K's layout). BPTR: a
        block pointer, so no [BLOCK, D] address tensor is held in registers (launch option)."""
        if BPTR:
            return tl.load(tl.make_block_ptr(P + off, (S, D), (D, 1), (start, 0), (BLOCK, D), (1, 0)))
        else:
            cols = start + tl.arange(0, BLOCK)
            return tl.load(P + off + cols[:, None] * D + offs_d[None, :])

    @triton.jit
    def _key_cols(P, off, start, offs_d, S, D: tl.constexpr, BLOCK: tl.constexpr, BPTR: tl.constexpr):
        """The [D, BLOCK] columns start.. of a [D, S] slice at P + off (Vᵀ's layout, K-major)."""
        if BPTR:
            return tl.load(tl.make_block_ptr(P + off, (D, S), (S, 1), (0, start), (D, BLOCK), (1, 0)))
        else:
            cols = start + tl.arange(0, BLOCK)
            return tl.load(P + off + offs_d[:, None] * S + cols[None, :])

    @triton.jit
    def _scores(q, qe, k, KE, kve_off, start, zero, D: tl.constexpr, BM: tl.constexpr, BLOCK: tl.constexpr,
                QK_MX: tl.constexpr, INTERP: tl.constexpr):
        """q·kᵀ of the key tile k at `start`, before the per-token scales. QK_MX: q and k are MXFP8's
        E4M3 bytes with their E8M0 codes (qe, and KE at kve_off: [S, D // 32] per head), one
        block-scaled product (sm_100's tcgen05 MMA; other targets get Triton's bf16 decomposition,
        which is exact here: E4M3 × 2^e fits bf16). `zero`, a run-time 0.0, starts that product's
        accumulator: Triton 3.6's sm_100 pipeline fails to compile a block-scaled MMA in a loop
        from a constant-zero accumulator ('tmem_alloc op uninitialized alloc must have a mutable
        memdesc type', TritonGPUOptimizeAccumulatorInit)."""
        if QK_MX:
            cols = start + tl.arange(0, BLOCK)
            ke = tl.load(KE + kve_off + cols[:, None] * (D // 32) + tl.arange(0, D // 32)[None, :])
            return tl.dot_scaled(q, qe, "e4m3", tl.trans(k), ke, "e4m3", acc=tl.full([BM, BLOCK], zero, tl.float32))
        else:
            return mma(q, tl.trans(k), INTERP)

    @triton.jit
    def _pv_tokens(acc, alpha, p, r, vs, vt, P_GLOB, BM: tl.constexpr, BLOCK: tl.constexpr, PV_FMT: tl.constexpr,
                   TINY: tl.constexpr, INTERP: tl.constexpr):
        """acc·α + P·V for per-token V scales: x = p·s_v[j]/r_i (<= 256) quantized per `pv`."""
        x = p * vs[None, :] * tl.math.div_rn(tl.full([BM], 1.0, tl.float32), r)[:, None]
        if PV_FMT == 1:  # E4M3(x): P's ×256 is already in p
            pv = mma(p_fp8_scaled(x, INTERP), tl.trans(vt), INTERP)
            return acc * alpha[:, None] + pv * r[:, None]
        else:  # bf16, or MXFP8 / NVFP4 emulated: exact dequantized values in a bf16 product
            xq, prs = quant_rows(x * (1.0 / 256.0), P_GLOB, PV_FMT, True, BM, BLOCK, TINY, INTERP)
            pv = mma(xq.to(tl.bfloat16), tl.trans(vt).to(tl.bfloat16), INTERP)
            return acc * alpha[:, None] + pv * (r * (prs * 256.0))[:, None]

    @triton.jit
    def _fwd_diag_tile(acc, m_i, l_i, q, qe, qs, K, KE, KS, VT, VS, kv_off, kve_off, kvs_off, start, offs_m, offs_d,
                       S, P_GLOB, qdoc, DOC, doc_off, D: tl.constexpr, BM: tl.constexpr, BLOCK: tl.constexpr,
                       PV_FMT: tl.constexpr, CAUSAL: tl.constexpr, SAFE: tl.constexpr, HAS_DOC: tl.constexpr,
                       TINY: tl.constexpr, INTERP: tl.constexpr, QK_MX: tl.constexpr):
        """The query block's own key tile, per-token K and V (CAUSAL False: no j <= i mask)."""
        cols = start + tl.arange(0, BLOCK)
        k = tl.load(K + kv_off + cols[:, None] * D + offs_d[None, :])  # (BLOCK, D)
        ks = tl.load(KS + kvs_off + cols)
        vs = tl.load(VS + kvs_off + cols)
        s = _scores(q, qe, k, KE, kve_off, start, P_GLOB * 0.0, D, BM, BLOCK, QK_MX, INTERP)
        s = s * (qs[:, None] * ks[None, :])  # (BM, BN), log2 units
        if HAS_DOC:  # block-diagonal: same document (and j <= i on the diagonal)
            keep = qdoc[:, None] == tl.load(DOC + doc_off + cols)[None, :]
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= cols[None, :])
        elif CAUSAL:
            keep = offs_m[:, None] >= cols[None, :]
        else:  # non-causal: nothing masked (one tile per program: the where() is cheap)
            keep = (offs_m[:, None] >= 0) & (cols[None, :] >= 0)
        s = tl.where(keep, s, float("-inf"))
        if SAFE:  # V-scale max over the keys row i sees (1 where it sees none: P is 0 there)
            r = tl.max(tl.where(keep, vs[None, :], 0.0), 1)
            r = tl.where(r > 0.0, r, 1.0)
        else:  # leaky: the whole tile, future keys included
            r = tl.zeros([BM], tl.float32) + tl.max(vs, 0)
        m_new = tl.maximum(m_i, tl.ceil(tl.max(s, 1)))
        m_use = finite_row_max(m_new, HAS_DOC)
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - (m_use - 8.0)[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        vt = tl.load(VT + kv_off + offs_d[:, None] * S + cols[None, :])  # (D, BN): Vᵀ, K-major
        acc = _pv_tokens(acc, alpha, p, r, vs, vt, P_GLOB, BM, BLOCK, PV_FMT, TINY, INTERP)
        return acc, m_new, l_i

    @triton.jit
    def _fwd_off_tile(acc, m_i, l_i, cv, q, qe, qs, K, KE, KS, KB, KBS, VT, VS, VBT, VBS, kv_off, kve_off, kvs_off,
                      kvb_off, start, offs_m, offs_d, S, P_GLOB, qdoc, DOC, doc_off, D: tl.constexpr,
                      BM: tl.constexpr, BLOCK: tl.constexpr, PV_FMT: tl.constexpr, SAFE: tl.constexpr,
                      HAS_DOC: tl.constexpr, K_OFF: tl.constexpr, V_OFF: tl.constexpr, CHAIN: tl.constexpr,
                      TINY: tl.constexpr, INTERP: tl.constexpr, BPTR: tl.constexpr, QK_MX: tl.constexpr,
                      V_PORDER: tl.constexpr = False):
        """A key tile wholly left of (or, non-causal, right of) the diagonal. acc is in units of
        cv (V's tile scale of the last chained product; 1 without V_OFF). BPTR: K and Vᵀ tiles
        through block pointers (a launch option, see `launch_config`). V_PORDER: V's copy in
        `formats.p_register_order` (`OffDiagonal.p_order`)."""
        cols = start + tl.arange(0, BLOCK)
        if K_OFF:  # one K scale for the tile: S = dot · c_i, fused into exp2's FMA
            k = _key_rows(KB, kv_off, start, offs_d, S, D, BLOCK, BPTR)
            c = qs * tl.load(KBS + kvb_off + start // BLOCK)
            s = mma(q, tl.trans(k), INTERP)
        else:
            k = _key_rows(K, kv_off, start, offs_d, S, D, BLOCK, BPTR)
            ks = tl.load(KS + kvs_off + cols)
            s = _scores(q, qe, k, KE, kve_off, start, P_GLOB * 0.0, D, BM, BLOCK, QK_MX, INTERP)
            s = s * (qs[:, None] * ks[None, :])
        if HAS_DOC:
            keep = qdoc[:, None] == tl.load(DOC + doc_off + cols)[None, :]
            s = tl.where(keep, s, float("-inf"))
        if K_OFF:
            m_new = tl.maximum(m_i, tl.ceil(tl.max(s, 1) * c))  # c > 0: max commutes with it
        else:
            m_new = tl.maximum(m_i, tl.ceil(tl.max(s, 1)))
        m_use = finite_row_max(m_new, HAS_DOC)
        alpha = tl.exp2(m_i - m_use)
        if K_OFF:
            p = tl.exp2(s * c[:, None] - (m_use - 8.0)[:, None])
        else:
            p = tl.exp2(s - (m_use - 8.0)[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if V_OFF:  # one V scale for the tile: P8 = E4M3(p), the product chains in units of vsb
            vt = _key_cols(VBT, kv_off, start, offs_d, S, D, BLOCK, BPTR)
            vsb = tl.load(VBS + kvb_off + start // BLOCK)
            p8 = p_fp8_scaled(p, INTERP)
            if V_PORDER:  # the copy's keys in `formats.p_register_order`: P's columns put in the same order
                p8 = tl.reshape(tl.permute(tl.reshape(p8, [BM, BLOCK // 32, 2, 2, 4, 2]), [0, 1, 2, 4, 3, 5]),
                                [BM, BLOCK])
            carry = acc * (alpha * (cv / vsb))[:, None]
            if CHAIN and not INTERP:
                acc = tl.dot(p8, tl.trans(vt), carry)
            else:  # a fresh product per tile (and the interpreter's exact fp32 product)
                acc = carry + mma(p8, tl.trans(vt), INTERP)
            cv = vsb
        else:
            vs = tl.load(VS + kvs_off + cols)
            r = tl.zeros([BM], tl.float32) + tl.max(vs, 0)  # every key precedes every row
            if HAS_DOC:
                if SAFE:  # r over the keys the row sees
                    r = tl.max(tl.where(keep, vs[None, :], 0.0), 1)
                    r = tl.where(r > 0.0, r, 1.0)
            vt = _key_cols(VT, kv_off, start, offs_d, S, D, BLOCK, BPTR)
            acc = _pv_tokens(acc, alpha, p, r, vs, vt, P_GLOB, BM, BLOCK, PV_FMT, TINY, INTERP)
        return acc, m_new, l_i, cv

    @triton.jit
    def _fwd_kernel(Q, QS, Q8, K, KS, KB, KBS, VT, VS, VBT, VBS, O, O8, OS, LSE2, MOFF, DOC, DSTART, DEND, QE, KE,
                    qk_scale, P_GLOB, S, G, HKV, D: tl.constexpr, BLOCK: tl.constexpr, PV_FMT: tl.constexpr,
                    CAUSAL: tl.constexpr, SAFE: tl.constexpr, SAVE_O8: tl.constexpr, TINY: tl.constexpr,
                    INTERP: tl.constexpr, HAS_DOC: tl.constexpr = False, K_OFF: tl.constexpr = False,
                    V_OFF: tl.constexpr = False, CHAIN: tl.constexpr = False, BPTR: tl.constexpr = False,
                    QK_MX: tl.constexpr = False, BM: tl.constexpr = 128, FUSE_Q: tl.constexpr = False,
                    V_PORDER: tl.constexpr = False, SAVE_Q: tl.constexpr = True):
        n_m = tl.num_programs(0)
        pid_m = n_m - 1 - tl.program_id(0)  # longest causal rows first: fewer idle SMs at the tail
        bh = tl.program_id(1).to(tl.int64)  # b * Hq + h
        bhk = bh // G  # b * Hkv + h // G: the shared K/V head (GQA)
        first = pid_m * BM  # the program's first query row; BM divides BLOCK
        offs_m = first + tl.arange(0, BM)
        offs_d = tl.arange(0, D)
        q_off = bh * S * D
        kv_off = bhk * S * D
        kvb_off = bhk * (S // BLOCK)
        rows = q_off + offs_m[:, None] * D + offs_d[None, :]
        if FUSE_Q:  # Q arrives in bf16: quantize its rows here (the program owns them) and write the bytes
            q8, qs = fp8_row_bytes(tl.load(Q + rows).to(tl.float32), BM, D, TINY)  # and scales for the backward
            if SAVE_Q:  # (a forward nothing will differentiate skips them)
                tl.store(Q8 + rows, q8)
                tl.store(QS + bh * S + offs_m, qs)
            q = q8.to(tl.float8e4nv, bitcast=True)
            qs = qs * qk_scale
        else:
            q = tl.load(Q + rows)
            qs = tl.load(QS + bh * S + offs_m) * qk_scale
        kve_off = bhk * S * (D // 32)
        if QK_MX:  # Q's E8M0 codes, [BM, D // 32]
            qe = tl.load(QE + bh * S * (D // 32) + offs_m[:, None] * (D // 32) + tl.arange(0, D // 32)[None, :])
        else:
            qe = qs
        m_i = tl.full([BM], float("-inf"), tl.float32)
        l_i = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, D], tl.float32)
        cv = tl.full([], 1.0, tl.float32)
        doc_off = (bhk // HKV) * S  # the batch row's doc ids
        diag = first // BLOCK * BLOCK  # the key tile holding the program's rows
        hi = S
        if HAS_DOC:  # key tiles wholly before the first row's document are masked for every row: skip
            qdoc = tl.load(DOC + doc_off + offs_m)
            lo = tl.load(DSTART + doc_off + first) // BLOCK * BLOCK
            if not CAUSAL:  # and those wholly after the last row's document
                hi = (tl.load(DEND + doc_off + first + BM - 1) + BLOCK - 1) // BLOCK * BLOCK
        else:
            qdoc = offs_m
            lo = 0
        for start in range(lo, diag, BLOCK):
            acc, m_i, l_i, cv = _fwd_off_tile(acc, m_i, l_i, cv, q, qe, qs, K, KE, KS, KB, KBS, VT, VS, VBT, VBS,
                                              kv_off, kve_off, bhk * S, kvb_off, start, offs_m, offs_d, S, P_GLOB,
                                              qdoc, DOC, doc_off, D, BM, BLOCK, PV_FMT, SAFE, HAS_DOC, K_OFF, V_OFF,
                                              CHAIN, TINY, INTERP, BPTR, QK_MX, V_PORDER)
        acc = acc * cv  # back to true units for the per-token diagonal product
        cv = cv * 0.0 + 1.0
        acc, m_i, l_i = _fwd_diag_tile(acc, m_i, l_i, q, qe, qs, K, KE, KS, VT, VS, kv_off, kve_off, bhk * S, diag,
                                       offs_m, offs_d, S, P_GLOB, qdoc, DOC, doc_off, D, BM, BLOCK, PV_FMT, CAUSAL,
                                       SAFE, HAS_DOC, TINY, INTERP, QK_MX)
        if not CAUSAL:
            for start in range(diag + BLOCK, hi, BLOCK):
                acc, m_i, l_i, cv = _fwd_off_tile(acc, m_i, l_i, cv, q, qe, qs, K, KE, KS, KB, KBS, VT, VS, VBT,
                                                  VBS, kv_off, kve_off, bhk * S, kvb_off, start, offs_m, offs_d, S,
                                                  P_GLOB, qdoc, DOC, doc_off, D, BM, BLOCK, PV_FMT, SAFE, HAS_DOC,
                                                  K_OFF, V_OFF, CHAIN, TINY, INTERP, BPTR, QK_MX, V_PORDER)
            acc = acc * cv
        o = to_bf16(acc / l_i[:, None], INTERP)
        tl.store(O + rows, o)
        lse2 = (m_i - 8.0) + tl.log2(l_i)  # l carries P's ×256; saved as lse2 and int8 floor(lse2) - M
        tl.store(LSE2 + bh * S + offs_m, lse2)
        tl.store(MOFF + bh * S + offs_m, (tl.floor(lse2) - m_i).to(tl.int8))
        if SAVE_O8:  # the backward's copy of O, fused: formats.quantize_fp8_per_token of the bf16 O
            o8, os = fp8_row_bytes(o.to(tl.float32), BM, D, TINY)
            tl.store(O8 + rows, o8)
            tl.store(OS + bh * S + offs_m, os)


def fused_q_operand(q: torch.Tensor):
    """The Operand a forward with `q_raw` fills: empty fp8 bytes [..., S, D] and fp32 scales [..., S]."""
    from .attention_operands import Operand
    from .formats import FP8_DTYPE

    # one allocation for both, saved for the backward together (`buffers.carve`)
    return Operand(*carve(q.device, [(tuple(q.shape), FP8_DTYPE), (tuple(q.shape[:-1]), torch.float32)]))


def native_block_scaled(x: torch.Tensor) -> bool:
    """Whether x's device has block-scaled MMA (MXFP8 / NVFP4 in hardware: sm_100+, Blackwell).
    There the forward's QKᵀ of an mxfp8 `qk` runs as one `tl.dot_scaled` product over the format's
    bytes and E8M0 codes; elsewhere (the H200: sm_90) the exact dequantized values go through bf16
    products. Written for Blackwell and compiled for sm_100 in the tests (tcgen05 block-scaled MMA
    in the PTX), but never run on one: none is lent here."""
    return x.is_cuda and not INTERPRET and device_capability(x.device.index) >= (10, 0)


@dataclass(frozen=True)
class ForwardPlan:
    """What a forward call decides before its pre-pass, from one read of the launch config (`plan`).

    fuse_q: the forward kernel quantizes Q itself (`forward`'s q_raw) instead of the pre-pass: the launch option
    "fuse_q" where it is set, else where the sm_90 Gluon kernel runs (fp8 `qk` and `pv`, D = 128, causal, no
    document masking): each program quantizes its Q rows while its first K / Vᵀ tiles load. Only with per-token Q
    (safeguards on) and an fp8 `qk`.
    v_p_order: V's token-block copy is written in `formats.p_register_order` (`prepare_forward(v_p_order=True)`):
    where the Gluon kernel reads it (`attention_fwd_gluon.P_ORDER`, or the launch option p_order) with fp8 `pv` and
    safeguards on; its P then reaches its P·V product without a layout exchange. Only the forward reads that copy;
    every kernel takes either order (the Triton kernel permutes P to match).
    launch_dependents: the forward kernel is a programmatic dependent launch of the key-sides pass before it (launch
    option "pdl", default `attention_fwd_gluon.PDL`; the Gluon kernel only), so that the pass lets it start early
    (`prepare_forward(launch_dependents=True)`)."""

    fuse_q: bool
    v_p_order: bool
    launch_dependents: bool


def plan(q: torch.Tensor, spec, causal: bool, safeguards: bool, has_doc: bool) -> ForwardPlan:
    """The forward's `ForwardPlan` for these inputs (q: bf16 Q, for its device and head dim)."""
    config = launch_config(q.shape[-1], spec.emulated)
    gluon = bool(config.get("gluon")) and attention_fwd_gluon.unsupported(q, spec, causal, has_doc) is None
    per_token_q = spec.qk == "fp8" and safeguards
    fuse_q = per_token_q and bool(config.get("fuse_q", gluon))
    v_p_order = safeguards and spec.pv == "fp8" and gluon and bool(config.get("p_order", attention_fwd_gluon.P_ORDER))
    return ForwardPlan(fuse_q, v_p_order, gluon and bool(config.get("pdl", attention_fwd_gluon.PDL)))


def fuses_q(q: torch.Tensor, spec, causal: bool, safeguards: bool, has_doc: bool) -> bool:
    """`plan(...).fuse_q`."""
    return plan(q, spec, causal, safeguards, has_doc).fuse_q


def orders_v_copy(q: torch.Tensor, spec, causal: bool, safeguards: bool, has_doc: bool) -> bool:
    """`plan(...).v_p_order`."""
    return plan(q, spec, causal, safeguards, has_doc).v_p_order


def launches_dependent(q: torch.Tensor, spec, causal: bool, safeguards: bool, has_doc: bool) -> bool:
    """`plan(...).launch_dependents`."""
    return plan(q, spec, causal, safeguards, has_doc).launch_dependents


def launch_config(d: int, emulated: bool) -> dict:
    """num_warps / num_stages (and "bm"): on sm_90 the fp8 fast path (D = 128, no emulated operand)
    runs programs of 64 query rows with 4 warps and 3 stages, two per SM (255 registers, 32K per
    program), so one program's softmax runs beside the other's products: 1.949 → 1.787 ms at S = 8k,
    B×H = 64 on the H200 (9d391e3; 4 warps × 2 stages: 1.927). Every other case keeps 128×128 tiles,
    8 warps, 3 stages (FLAMIA.md); the emulated formats hold wider register tiles, so they pipeline
    one stage less. Where the sm_90 Gluon kernel applies (`attention_fwd_gluon.eligible`: causal fp8
    with the token-block copies, no document masking) the fast path runs it instead ("gluon"; its
    chained variant, three programs per SM: 1.677 against 1.745 ms at S = 8k and 3.059 against 3.253 ms at
    16k on the H200, 6e55fff), bit-identical to this kernel's CHAIN launch. Benchmark
    options on top: CHAIN (one accumulator chained through the P·V products), BPTR (the
    off-diagonal K and Vᵀ tiles through block pointers: on the H200 at S = 8k it timed the same,
    1.932 ms against 1.935, bit-identical, so it stays an option; compiled for sm_90 with the JIT's
    argument specialization neither variant spills, scripts/kernel_registers.py), "bm" (see
    `forward`) and "fuse_q" (attention.py then has the kernel quantize Q: `forward`'s q_raw)."""
    if INTERPRET:
        return {"num_warps": 4, "num_stages": 1}
    if d == 128 and not emulated:  # the fp8 fast path: programs of 64 rows, two or more per SM
        return {"num_warps": 4, "num_stages": 3, "bm": 64, "gluon": True}
    if d == 64 and not emulated and FAST_D64:
        return dict(D64_LAUNCH)
    return {"num_warps": 8, "num_stages": 2 if emulated else 3}


# D = 64 has no Gluon kernel (its tile is the head dim). Its Triton forward at 4 warps and 3 stages: 2.336 against
# 3.425 ms at 8 warps on the H200 at S = 8k, B×H = 4×32 (session 38; 255 registers and 2.6 KB spilled on sm_90, and
# still the fastest of the sweep). FAST_D64 (with attention_bwd.FAST_D64) turns it on once the GPU reference tests have
# passed under it; until then scripts/launches/d64.json carries the same launch for the benchmarks.
FAST_D64 = False
D64_LAUNCH = {"num_warps": 4, "num_stages": 3}


def forward(q, k, v, spec, causal: bool, safeguards: bool, sm_scale: float, block: int, save_o8: bool,
            config: dict | None = None, doc=None, q_raw: torch.Tensor | None = None, save_q: bool = True):
    """Run the forward kernel.

    q, k: Operands [B, Hq|Hkv, S, D]; v: Operand with `vals_t` [B, Hkv, D, S] (Vᵀ, K-major).
    k.off / v.off (`attention_operands.OffDiagonal`, v's transposed): the token-block copies read
    off the diagonal, or None (the per-token operand on every tile).
    doc: None, or `document.doc_tables(doc_ids)` (index, start, end int32 [B, S]): document masking.
    config: num_warps / num_stages override, CHAIN (False: a fresh P·V product per tile), "gluon"
    (the sm_90 Gluon kernel of `attention_fwd_gluon` where it applies, with "pipe" and "gluon_stages",
    by default its chained variant; pipe 4 the warp-specialized kernel of `attention_fwd_ws`, with
    "pingpong"; elsewhere this Triton kernel at num_warps / num_stages), and "bm"
    (query rows per program: the tile, or half of it, which with 4 warps holds a quarter of the
    registers and lets two programs share an SM, one's softmax running beside the other's products;
    every row's arithmetic is the same, only the programs' row blocking changes).
    q.mx and k.mx (mxfp8 bytes and E8M0 codes, `prepare_forward(mx_parts=True)`): QKᵀ as one
    block-scaled product (`tl.dot_scaled`), the Blackwell path (see `native_block_scaled`).
    q_raw (bf16 [B, Hq, S, D], with `fused_q_operand`'s empty q): the kernel quantizes Q per token
    itself, each program the rows it owns, and fills q.vals / q.scale with the bytes and scales of
    `quantize.quantize_fp8_per_token(q_raw)` for the backward; one read of Q instead of a pre-pass
    read and write and a second read (fp8 `qk` with per-token Q, i.e. safeguards on, only). save_q False: those
    bytes and scales are left unwritten (a forward nothing will differentiate needs neither).
    Returns (O bf16 [B, Hq, S, D], lse2 fp32 [B, Hq, S], M offset int8 [B, Hq, S],
    o8 fp8 or None, o_scale or None); see reference.pack_stats for the row statistics.
    """
    b, hq, seq, d = q.vals.shape
    group = hq // k.vals.shape[1]
    o = torch.empty(b, hq, seq, d, dtype=torch.bfloat16, device=q.vals.device)
    lse2 = torch.empty(b, hq, seq, dtype=torch.float32, device=q.vals.device)
    moff = torch.empty(b, hq, seq, dtype=torch.int8, device=q.vals.device)
    o8 = torch.empty(o.shape, dtype=torch.uint8, device=o.device) if save_o8 else o
    o_scale = torch.empty_like(lse2) if save_o8 else lse2
    doc_ptrs = doc if doc is not None else (moff, moff, moff)  # unread without HAS_DOC
    k_off = (k.off.vals, k.off.scale) if k.off is not None else (k.vals, k.scale)  # unread without K_OFF
    v_off = (v.off.vals, v.off.scale) if v.off is not None else (v.vals_t, v.scale)  # unread without V_OFF
    qk_mx = q.mx is not None and k.mx is not None
    if qk_mx and INTERPRET:
        raise ValueError("the block-scaled QKᵀ (Operand.mx) has no interpreter path: tl.dot_scaled runs on GPUs only")
    q_in, k_in, q_e, k_e = (q.mx[0], k.mx[0], q.mx[1], k.mx[1]) if qk_mx else (q.vals, k.vals, moff, moff)
    q8_out = o  # unread without FUSE_Q
    # a non-contiguous q_raw is copied below: a kernel between the key-sides pass and this one
    q_copied = q_raw is not None and not q_raw.is_contiguous()
    if q_raw is not None:
        if spec.qk != "fp8" or qk_mx or not safeguards:
            raise ValueError(f"fused Q quantization needs an fp8 qk with per-token Q (safeguards on); got "
                             f"qk={spec.qk}, safeguards={safeguards}{', block-scaled QK' if qk_mx else ''}")
        if q_raw.shape != q.vals.shape:
            raise ValueError(f"q_raw {tuple(q_raw.shape)} must have q's shape {tuple(q.vals.shape)}")
        q_in, q8_out = q_raw.contiguous(), q.vals.view(torch.uint8)
    config = dict(config or launch_config(d, spec.emulated))
    config.pop("fuse_q", None)  # the caller's choice, made by passing q_raw
    config.pop("p_order", None)  # likewise, made by the order of v.off (`plan`)
    gluon, pipe = config.pop("gluon", False), config.pop("pipe", attention_fwd_gluon.PIPE)
    gluon_stages = config.pop("gluon_stages", None)
    pingpong = config.pop("pingpong", attention_fwd_ws.PINGPONG)
    refill_under_qk = config.pop("refill_qk", None)
    head_chunk, pdl = config.pop("head_chunk", None), config.pop("pdl", None)
    half_diag = config.pop("half_diag", None)
    save_q = save_q or bool(config.pop("keep_q", False))  # an A/B timing's way back to the bytes written always
    if gluon and attention_fwd_gluon.eligible(q, k, v, spec, causal, doc, q_raw, qk_mx) is None:
        if pipe == attention_fwd_ws.PIPE:  # the warp-specialized kernel, the same bits as pipe 3
            return attention_fwd_ws.forward(q, k, v, safeguards, sm_scale, save_o8, stages=gluon_stages,
                                            q_raw=q_in if q_raw is not None else None, pingpong=pingpong)
        if q_copied:  # a dependent launch reads q_raw before it waits, and would overlap the kernel that copied it
            pdl = False
        return attention_fwd_gluon.forward(q, k, v, safeguards, sm_scale, save_o8, pipe=pipe, stages=gluon_stages,
                                           q_raw=q_in if q_raw is not None else None, refill_under_qk=refill_under_qk,
                                           head_chunk=head_chunk, pdl=pdl, save_q=save_q, half_diag=half_diag)
    bm = config.pop("bm", block)
    if bm not in (block, block // 2):
        raise ValueError(f"forward config bm={bm}: allowed {block} (the tile) or {block // 2} query rows per program")
    _fwd_kernel[(seq // bm, b * hq)](
        q_in, q.scale, q8_out, k_in, k.scale, *k_off, v.vals_t, v.scale, *v_off, o, o8, o_scale, lse2, moff,
        *doc_ptrs, q_e, k_e, sm_scale * 1.4426950408889634, p_global_value(), seq, group, k.vals.shape[1],
        D=d, BLOCK=block, PV_FMT=fmt_code(spec.pv), CAUSAL=causal, SAFE=safeguards, SAVE_O8=save_o8,
        TINY=FP8_TINY, INTERP=INTERPRET, HAS_DOC=doc is not None, K_OFF=k.off is not None,
        V_OFF=v.off is not None, QK_MX=qk_mx, BM=bm, FUSE_Q=q_raw is not None, SAVE_Q=save_q,
        V_PORDER=v.off is not None and v.off.p_order, **config,
    )
    if not save_o8:
        return o, lse2, moff, None, None
    return o, lse2, moff, o8.view(torch.float8_e4m3fn), o_scale
