"""FLAMIA dK/dV and dQ kernels for sm_90 in Gluon: the fp8 fast path's backward.

The Triton dK/dV kernel (`attention_bwd._dkdv_kernel`, fast-path launch: 64 keys and 4 warps per
program, 32-query sub-tiles, `pre` copies) waits for the S and dP products of a sub-tile as soon as
it issues them. Here each off-diagonal sub-tile j runs

    issue Sᵀ(j + 1) = K·Q(j + 1)ᵀ and dPᵀ(j + 1) = V·dO(j + 1)ᵀ      (async, FP8)
    the elementwise work of sub-tile j                                (P, dS; on the CUDA cores)
    issue dV += y(j)·dO8(j) (FP8) and dK += dSᵀ(j)·Qb(j) (bf16)        (async, chained)
    wait for Sᵀ(j + 1), dPᵀ(j + 1) only (dV, dK of j stay in flight)

with every operand in shared memory (TMA, a ring of stages; K and V rows from `attention_bwd_copies`, dO's bytes
K-major (dO8ᵀ) from dO's pre-pass, and each sub-tile's query statistics from its `query_stats`: gathered from global
memory per sub-tile, their latency was a fifth of the warps' stalls), so no register holds a K or V copy. The
arithmetic is `_kv_tile`'s for the fast path, operation for operation (the diagonal sub-tiles on the per-token bytes,
the off-diagonal ones on the token-block copies; dV as one FP8 product, `AttentionSpec.fp8_dv`: y = E4M3 of
P·s_dO / τ per key row, `reference.dv_row_scale`), and the MMA shapes are the same, so dK matches the Triton kernel
bit for bit and dV to the FP8 accumulation's order (the GPU tests compare them). The FP8 dV product took the
warp-specialized kernel from 4.01 to 3.58 ms at S = 8k, B×H = 64 as a probe (`scripts/bwd_fp8_probe.py`, session 16:
half the dV product's tensor-core time, no scaled dO rows written for the diagonal, a 4 KB dO8ᵀ tile a stage
instead of 8 KB of bf16 rows).

Constexprs FP8_DK (the dK products here, used by the warp-specialized kernel) and FP8_DQ (the dQ kernel) are the
launch options fp8_dk / fp8_dq: probes that run those bf16 products in FP8 under the bound row scales of
`reference.dk_row_scale` / `dq_row_scale` against Q8ᵀ / K8ᵀ (session 17: −1 to −3% of each kernel for 7% more gradient
error, not adopted; docs/kernels.md, "Launch configurations").

Since session 15 the fast path runs this dK/dV kernel warp-specialized (`attention_dkdv_ws`: a TMA producer warp
feeds the same sub-tile code, `_diag_sub_tile` and `_off_diagonal` here); this fused form stays as launch option
ws_dkdv = False.

Scope (`eligible`): CUDA sm_90, the fast path's `pre` launch (64 keys, sub-tiles of 32, D = 128, fp8
Q / K / V / dO with P fp8 (so FP8 dV) and dS bf16, the token-block copies), causal, no document masking, dQ by its
own kernel. Gluon has no interpreter: on the CPU it is compiled for sm_90 only.

The dQ kernel (`dq`, launch option `gluon_dq`: 32 or 64 keys per sub-tile; `dq_eligible`, the same scope
with 64-row programs) is `attention_bwd._dq_kernel`'s arithmetic with each key sub-tile's K8, V rows and
bf16 K by TMA, and each sub-tile's products waited for as they are issued, so that it fits 128 registers
and four programs share an SM (with the next sub-tile's products in flight it needed 203, ran two per SM
and lost to the Triton kernel: f61bd6d). Bit-identical to the Triton dQ kernel on the H200; at S = 8k,
B×H = 64: 2248.8–2321.6 µs at three programs per SM against the Triton kernel's 2458.5–2484.5 (be72366),
2156.8–2168.5 at four (session 10).
"""
from __future__ import annotations

import torch

from ._triton_env import HAS_GLUON, gluon_unavailable
from .attention_bwd_copies import STATS_ROWS
from .gluon_layouts import nvmma_layout
from .relaunch import Relaunch

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# keys per dK/dV program: a warpgroup (wgmma M = 64) per 64 keys. 128 (two warpgroups sharing each query sub-tile,
# half the L2 reads) ran slower on the H200: 5.36-5.41 ms against 4.40-4.49 at S = 8k (session11_wide.sh)
BN = 64
BM = 32  # queries per sub-tile
DS_QB = 128  # queries per tile of the dS buffer (`ds_buffer`): the dQ-from-dS kernel's rows per program
# the row of `attention_bwd_copies.query_stats` (past its five statistics) that holds 1/ρ per query for an fp8 dS
# buffer (`_store_ds`; launch options ds_out with fp8_dq)
DS_IRHO_ROW = 5
# an fp8 dS buffer's key order within each 16 keys (`_store_ds`: keys r and r + 8 share a 16-bit word); K's K-major
# copies for it follow the same order (`attention_bwd_copies`)
DS_KEY_ORDER = tuple(k for g in range(8) for k in (g, g + 8))
TB = 128  # the forward's key tile (token block)
STAGES = 3  # sub-tiles in flight: 3 × 25 KB + K, V and the diagonal's dO tile, two programs per SM
# The Triton kernels' fast-path launch (`attention_bwd.launch_config`) that the Gluon kernels stand in for
FAST_BN, FAST_BM = 64, 64


def warps_for(rows: int) -> int:
    """Warps of a program whose accumulators are `rows` tall: one warpgroup (4 warps) per wgmma M of 64."""
    return rows // 16


def _unsupported(q, k, v, spec, causal: bool, doc, launch_why: str | None) -> str | None:
    """`eligible`'s and `dq_eligible`'s shared checks, in order: the GPU, the kernel's launch (launch_why: None
    when it is the kernel's, else why not), then the operands both Gluon backward kernels take."""
    why = gluon_unavailable(q.vals)
    if why is not None:
        return why
    if launch_why is not None:
        return launch_why
    if q.vals.shape[-1] != TB or not spec.fp8_dv or spec.ds != "bf16" or k.off is None or v.off is None:
        return "D = 128, fp8 P and dO (the FP8 dV product), bf16 dS, with the token-block copies only"
    if not causal or doc is not None:
        return "causal, without document masking, only"
    return None


def eligible(q, k, v, spec, causal: bool, doc, cfg: dict) -> str | None:
    """None when the Gluon dK/dV kernel can run this backward under launch `cfg`, else why not."""
    ours = cfg.get("pre") and cfg.get("bn") == FAST_BN and cfg.get("sub") == BM and cfg.get("dq") == "kernel"
    return _unsupported(q, k, v, spec, causal, doc,
                        None if ours else "the fast path's launch only (pre, bn = 64, sub = 32, dQ by its own kernel)")


if HAS_GLUON:

    _DS_QB = gl.constexpr(DS_QB)
    _DS_IRHO_ROW = gl.constexpr(DS_IRHO_ROW)

    @gluon.jit
    def _init_ring(STAGES: gl.constexpr):
        """Both kernels' mbarriers, initialised: one per ring stage, and one for the operands loaded once."""
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        once = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
        mbarrier.init(once, count=1)
        return ready, once

    @gluon.jit
    def _retire_ring(ready, once, STAGES: gl.constexpr):
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(once)

    @gluon.jit
    def _fresh_products(a0, b0, a1, b1, zero):
        """a0·b0ᵀ and a1·b1ᵀ (FP8, B from shared memory read K-major), each into a fresh accumulator; issued,
        not waited for: Sᵀ and dPᵀ of the dK/dV kernel, S and dP of the dQ kernel."""
        x0 = warpgroup_mma(a0, b0.permute((1, 0)), zero, use_acc=False, is_async=True)
        x1 = warpgroup_mma(a1, b1.permute((1, 0)), zero, use_acc=False, is_async=True)
        return x0, x1

    @gluon.jit
    def _stats_row(st_s, i: gl.constexpr, QRY: gl.constexpr):
        """Row i of a [STATS_ROWS, BM] shared tile as a [BM] vector in QRY = SliceLayout(0, S_L): loaded as
        [1, BM] in S_L (its rows broadcast) and reduced over that one row (a shared view cannot drop to rank
        1 in Gluon)."""
        return gl.max(st_s.slice(i, 1, dim=0).load(QRY.parent), 0)

    @gluon.jit
    def _query_stats(st_s, QRY: gl.constexpr):
        """Per query of the sub-tile: s_q, M, 1/l, delta, s_dO (`row_stats`' values), from the stage's copy
        of `attention_bwd_copies.query_stats` (one TMA box; as five gathers from global memory each
        sub-tile waited out their latency: Nsight Compute's 'long scoreboard', ~20% of the stalls)."""
        return (_stats_row(st_s, 0, QRY), _stats_row(st_s, 1, QRY), _stats_row(st_s, 2, QRY),
                _stats_row(st_s, 3, QRY), _stats_row(st_s, 4, QRY))

    @gluon.jit
    def _dst(pt, dpt, sv, linv, delta, sdo):
        """dSᵀ in fp32, `_kv_tile`'s expression: (p / l)(dP - delta)."""
        dpt = dpt * (sv * sdo[None, :])
        return (pt * (linv * (1.0 / 256.0))[None, :]) * (dpt - delta[None, :])

    @gluon.jit
    def _dst_bf16(pt, dpt, sv, qs, linv, delta, sdo):
        """dSᵀ in bf16, times s_q (dK's partner fold)."""
        return (_dst(pt, dpt, sv, linv, delta, sdo) * qs[None, :]).to(gl.bfloat16)

    @gluon.jit
    def _e4m3_pairs(lo, hi):
        """E4M3 of lo and hi (fp32) packed into one 16-bit word each, lo's byte low: one cvt a pair, the conversion
        `.to(gl.float8e4nv)` makes (round to nearest even, saturating to ±448). Converted by Gluon and then packed,
        each pair took a cvt of two neighbours of the layout and ~4 byte moves to regroup them (the SASS's LOP3 /
        PRMT / SHF: +30 instructions a sub-tile in the dK/dV kernel's loop). Triton's twin: `quantize._e4m3_pairs`
        (a Gluon kernel cannot call a Triton function)."""
        return gl.inline_asm_elementwise("cvt.rn.satfinite.e4m3x2.f32 $0, $2, $1;", "=h,r,r", [lo, hi],
                                         dtype=gl.int16, is_pure=True, pack=1)

    @gluon.jit
    def _store_ds(dst, kscale, yout, c):
        """DS_OUT: this sub-tile's dS·s_k in bf16 (the dQ kernel's A operand, `dq_from_ds`: the same expression as
        `_dq_gluon_kernel`'s y) into the program's ring of two shared tiles and from there by TMA to its place in
        the dS buffer (`ds_buffer`). One barrier a sub-tile: the wait for the other tile's store (issued a
        sub-tile ago) comes before it, so that tile is free for the next sub-tile. An fp8 buffer (launch options
        ds_out with fp8_dq) takes E4M3(dS·s_k/ρ) instead, 1/ρ per query (`reference.dq_row_scale`, a power of two)
        from row DS_IRHO_ROW of the sub-tile's statistics: the FP8 dQ product's A operand, half the bytes, stored
        with the keys contiguous (FP8 wgmma reads its A operand K-major only). The transposition is one stmatrix
        .trans a thread: a thread holds keys r and r + 8 of each query it has, so those two bytes become one 16-bit
        word and the tile is stored [queries, key pairs] — the keys of each 16 in the order 0, 8, 1, 9, ..., 7, 15
        (`DS_KEY_ORDER`), which K's K-major copy follows (`attention_bwd_copies`); the shared tiles and the TMA
        descriptor see the fp8 buffer as those 16-bit words (int16). As single bytes it took 16 byte stores a thread;
        in `dq_from_ds` Triton moved every byte through shared memory one by one."""
        y_s, y_desc, row, col, st_view = yout
        buf = y_s.index(c % 2)
        if y_s.dtype == gl.int16:
            irho = _stats_row(st_view, _DS_IRHO_ROW, gl.SliceLayout(0, dst.type.layout))
            # kscale·(1/ρ) first: off the diagonal kscale is the block's one scale, so one product a query, not
            # a second one a value (the same value: 1/ρ is a power of two)
            y = dst * (kscale * irho[None, :])
            BNK: gl.constexpr = y.shape[0]
            BQ: gl.constexpr = y.shape[1]
            # (w, g, q, h): key 16w + 8h + g of the accumulator's rows (a warp's 16, two a thread) to pair 8w + g
            lo, hi = gl.split(gl.permute(gl.reshape(y, [BNK // 16, 2, 8, BQ]), (0, 2, 3, 1)))
            buf.permute((1, 0)).store(gl.reshape(_e4m3_pairs(lo, hi), [BNK // 2, BQ]))
        else:
            buf.store((dst * kscale).to(gl.bfloat16))
        fence_async_shared()
        tma.store_wait(0)
        gl.thread_barrier()
        tma.async_copy_shared_to_global(y_desc, [row, col], buf)

    @gluon.jit
    def _dk_operand(pt, dpt, sv, qs, linv, delta, sdo, isig, A_L: gl.constexpr, A8_L: gl.constexpr,
                    FP8_DK: gl.constexpr, kscale=0, yout=0, c=0, DS_OUT: gl.constexpr = False):
        """The dK product's A operand: dSᵀ·s_q in bf16 (`_dst_bf16`), or FP8_DK (launch option fp8_dk, a probe) its
        E4M3 under the key row's bound scale (isig = 1/ρ per key, `reference.dk_row_scale`). DS_OUT: dS·kscale
        stored for the dQ kernel on the way (`_store_ds`)."""
        if FP8_DK:
            dpt = dpt * (sv * sdo[None, :])
            dst = (pt * (linv * (1.0 / 256.0))[None, :]) * (dpt - delta[None, :])
            return gl.convert_layout(((dst * qs[None, :]) * isig[:, None]).to(gl.float8e4nv), A8_L)
        elif DS_OUT:
            dst = _dst(pt, dpt, sv, linv, delta, sdo)
            _store_ds(dst, kscale, yout, c)
            return gl.convert_layout((dst * qs[None, :]).to(gl.bfloat16), A_L)
        else:
            return gl.convert_layout(_dst_bf16(pt, dpt, sv, qs, linv, delta, sdo), A_L)

    @gluon.jit
    def _dk_product(ds, qb_tile, dk, FP8_DK: gl.constexpr):
        """dK += dSᵀ·Q over the sub-tile's queries, issued: against QB (bf16 rows) or, FP8_DK, Q8ᵀ (K-major)."""
        if FP8_DK:
            return warpgroup_mma(ds, qb_tile.permute((1, 0)), dk, is_async=True)
        else:
            return warpgroup_mma(ds, qb_tile, dk, is_async=True)

    @gluon.jit
    def _dv_operand(pt, linv, sdo, itau, A8_L: gl.constexpr):
        """The FP8 dV product's A operand (`AttentionSpec.fp8_dv`, `_kv_tile`'s expression): E4M3 of
        (p · (1/l · s_dO)) / τ, p carrying P's ×256, τ the key row's scale (itau = 1/τ, [BN] keys)."""
        return gl.convert_layout(((pt * (linv * sdo)[None, :]) * itau[:, None]).to(gl.float8e4nv), A8_L)

    @gluon.jit
    def _off_operands(st, dpt, kbs, vbs, itau, isig, qk_scale, stats, A_L: gl.constexpr, A8_L: gl.constexpr,
                      FP8_DK: gl.constexpr, yout=0, c=0, DS_OUT: gl.constexpr = False):
        """The dV and dK products' A operands of an off-diagonal sub-tile (`_kv_tile` with the
        token-block copies: one K and one V scale for the tile; stats: its queries' `_query_stats`): Pᵀ·s_dO in
        E4M3 (`_dv_operand`), dSᵀ in bf16."""
        qs, m, linv, delta, sdo = stats
        st = st * (kbs * (qs * qk_scale))[None, :]
        pt = gl.exp2(st - (m - 8.0)[None, :])
        return (_dv_operand(pt, linv, sdo, itau, A8_L),
                _dk_operand(pt, dpt, vbs, qs, linv, delta, sdo, isig, A_L, A8_L, FP8_DK, kbs, yout, c, DS_OUT))

    @gluon.jit
    def _diag_sub_tile(k_s, v_s, smems, stage, ks, vs, itau, isig, offs_n, offs_m, dv, dk, zero, qk_scale,
                       QRY: gl.constexpr, A_L: gl.constexpr, A8_L: gl.constexpr, FP8_DK: gl.constexpr, yout=0, c=0,
                       DS_OUT: gl.constexpr = False):
        """dV and dK of a diagonal sub-tile (its operands in ring stage `stage`, waited for), accumulated and
        waited for: `_kv_tile`'s per-token K and V and the causal mask."""
        q_s, do_s, qb_s, dot_s, st_s = smems
        qs, m, linv, delta, sdo = _query_stats(st_s.index(stage), QRY)
        st, dpt = _fresh_products(k_s, q_s.index(stage), v_s, do_s.index(stage), zero)
        st, dpt = warpgroup_mma_wait(num_outstanding=0, deps=(st, dpt))
        st = st * (ks[:, None] * (qs * qk_scale)[None, :])
        keep = offs_n[:, None] <= offs_m[None, :]
        st = gl.where(keep, st, float("-inf"))
        pt = gl.exp2(st - (m - 8.0)[None, :])
        dv = warpgroup_mma(_dv_operand(pt, linv, sdo, itau, A8_L), dot_s.index(stage).permute((1, 0)), dv,
                           is_async=True)
        ds = _dk_operand(pt, dpt, vs[:, None], qs, linv, delta, sdo, isig, A_L, A8_L, FP8_DK, ks[:, None], yout, c,
                         DS_OUT)
        dk = _dk_product(ds, qb_s.index(stage), dk, FP8_DK)
        return warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk))

    @gluon.jit
    def _off_sub_tile(st, dpt, stats, smems, stage, kbs, vbs, itau, isig, dv, dk, qk_scale, A_L: gl.constexpr,
                      A8_L: gl.constexpr, FP8_DK: gl.constexpr, yout=0, c=0, DS_OUT: gl.constexpr = False):
        """dV and dK of an off-diagonal sub-tile from its Sᵀ, dPᵀ and query statistics (`_off_operands`), issued,
        not waited for."""
        q_s, do_s, qb_s, dot_s, st_s = smems
        y8, ds = _off_operands(st, dpt, kbs, vbs, itau, isig, qk_scale, stats, A_L, A8_L, FP8_DK, yout, c, DS_OUT)
        dv = warpgroup_mma(y8, dot_s.index(stage).permute((1, 0)), dv, is_async=True)
        dk = _dk_product(ds, qb_s.index(stage), dk, FP8_DK)
        return dv, dk

    @gluon.jit
    def _ds_place(ybase, lo, st_view, DS_OUT: gl.constexpr):
        """Where the sub-tile of queries lo.. goes in the dS buffer (`ds_buffer`): ybase = (its shared ring, its
        TMA descriptor, the index of this head's first tile plus the program's key block); a tile holds one key
        block's [BN, DS_QB] values, and query block qb's 2(qb + 1) tiles follow the qb(qb + 1) of blocks before it,
        so the box's (row, column) is ((ybase's index + qb(qb + 1))·BN, lo mod DS_QB); in an fp8 buffer, whose tiles
        are [DS_QB, BN] (the keys contiguous), ((ybase's index + qb(qb + 1))·DS_QB + lo mod DS_QB, 0). st_view: the
        sub-tile's statistics in its ring stage (an fp8 buffer's 1/ρ, `_store_ds`)."""
        if DS_OUT:
            y_s, y_desc, tile0 = ybase
            qb = lo // _DS_QB
            if y_s.dtype == gl.int16:
                return y_s, y_desc, (tile0 + qb * (qb + 1)) * _DS_QB + lo % _DS_QB, 0, st_view
            else:
                BN: gl.constexpr = y_desc.block_type.shape[0]
                return y_s, y_desc, (tile0 + qb * (qb + 1)) * BN, lo % _DS_QB, st_view
        else:
            return ybase

    @gluon.jit
    def _release(empty, stage):
        """A warp-specialized consumer is done with a ring stage: its statistics' plain shared loads (generic proxy)
        ordered before the producer's next TMA (async proxy) overwrites them, then the stage's mbarrier."""
        fence_async_shared()
        mbarrier.arrive(empty.index(stage), count=1)

    @gluon.jit
    def _done_with(j, c, n_off, stage, bh, lo, descs, smems, ready, empty, S, STAGES: gl.constexpr, BM: gl.constexpr,
                   STATS_ROWS: gl.constexpr, WS: gl.constexpr, LAST: gl.constexpr):
        """Off-diagonal sub-tile j's products have retired, so its ring stage is free: the warp-specialized kernel
        hands it back to its producer (`_release`), the fused kernel loads sub-tile j + STAGES into it."""
        if WS:
            _release(empty, stage)
        elif not LAST:
            if j + STAGES < n_off:
                _refill(j + STAGES, c, bh, lo, descs, smems, ready, STAGES, BM, S, STATS_ROWS)

    @gluon.jit
    def _off_diagonal(c, n_off, k_s, v_s, smems, ready, empty, kbs, vbs, itau, isig, dv, dk, zero, qk_scale, bh, lo,
                      descs, S, QRY: gl.constexpr, A_L: gl.constexpr, A8_L: gl.constexpr, STAGES: gl.constexpr,
                      BM: gl.constexpr, STATS_ROWS: gl.constexpr, WS: gl.constexpr, FP8_DK: gl.constexpr = False,
                      ybase=0, ylo=0, DS_OUT: gl.constexpr = False):
        """dV and dK over one query head's n_off > 0 off-diagonal sub-tiles, ring stages c.. (their first ones
        loaded or in flight): Sᵀ and dPᵀ of sub-tile j + 1 in flight during the elementwise work of j, each stage
        given up once its products retire (`_done_with`; WS: the warp-specialized kernel's consumer)."""
        q_s, do_s, st_s = smems[0], smems[1], smems[4]
        stage = c % STAGES
        mbarrier.wait(ready.index(stage), (c // STAGES) & 1)
        st, dpt = _fresh_products(k_s, q_s.index(stage), v_s, do_s.index(stage), zero)
        st, dpt = warpgroup_mma_wait(num_outstanding=0, deps=(st, dpt))
        for j in range(0, n_off - 1):
            stage = (c + j) % STAGES
            nxt = (c + j + 1) % STAGES
            # sub-tile j's statistics first: their shared loads complete under the wait for stage j + 1 and the issue
            # of its products, instead of stalling the first multiplications of j's elementwise work
            stats = _query_stats(st_s.index(stage), QRY)
            mbarrier.wait(ready.index(nxt), ((c + j + 1) // STAGES) & 1)
            st_n, dpt_n = _fresh_products(k_s, q_s.index(nxt), v_s, do_s.index(nxt), zero)
            dv, dk = _off_sub_tile(st, dpt, stats, smems, stage, kbs, vbs, itau, isig, dv, dk, qk_scale, A_L, A8_L,
                                   FP8_DK, _ds_place(ybase, ylo + j * BM, st_s.index(stage), DS_OUT), c + j, DS_OUT)
            # everything retires here: an accumulator still in flight across the loop's back edge
            # is read by the loop's register moves, and ptxas then serializes every wgmma (C7514)
            st, dpt, dv, dk = warpgroup_mma_wait(num_outstanding=0, deps=(st_n, dpt_n, dv, dk))
            _done_with(j, c, n_off, stage, bh, lo, descs, smems, ready, empty, S, STAGES, BM, STATS_ROWS, WS, False)
        j = n_off - 1
        stage = (c + j) % STAGES
        stats = _query_stats(st_s.index(stage), QRY)
        dv, dk = _off_sub_tile(st, dpt, stats, smems, stage, kbs, vbs, itau, isig, dv, dk, qk_scale, A_L, A8_L, FP8_DK,
                               _ds_place(ybase, ylo + j * BM, st_s.index(stage), DS_OUT), c + j, DS_OUT)
        dv, dk = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk))
        _done_with(j, c, n_off, stage, bh, lo, descs, smems, ready, empty, S, STAGES, BM, STATS_ROWS, WS, True)
        return dv, dk

    @gluon.jit
    def _store_rows(X, acc, bhk, S, first, BN: gl.constexpr, D: gl.constexpr):
        """The program's BN rows of an accumulator in bf16 [B·Hkv·S, D], from its own layout."""
        L: gl.constexpr = acc.type.layout
        offs_r = first + gl.arange(0, BN, layout=gl.SliceLayout(1, L))
        offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, L))
        gl.store(X + (bhk.to(gl.int64) * S + offs_r.to(gl.int64))[:, None] * D + offs_d[None, :], acc.to(gl.bfloat16))

    @gluon.jit
    def _store_dkdv(dv, dk, DK, DV, TAU, SIG, bhk, S, first, sm_scale, BN: gl.constexpr, D: gl.constexpr,
                    FP8_DK: gl.constexpr = False):
        """dV (times each row's τ / 256: the FP8 product's scales) and dK (times the softmax scale, and FP8_DK each
        row's ρ) in bf16."""
        DV_L: gl.constexpr = dv.type.layout
        offs_r = first + gl.arange(0, BN, layout=gl.SliceLayout(1, DV_L))
        tau = gl.load(TAU + bhk.to(gl.int64) * S + offs_r)
        _store_rows(DV, dv * (tau * (1.0 / 256.0))[:, None], bhk, S, first, BN, D)
        if FP8_DK:
            DK_L: gl.constexpr = dk.type.layout
            rho = gl.load(SIG + bhk.to(gl.int64) * S + first + gl.arange(0, BN, layout=gl.SliceLayout(1, DK_L)))
            _store_rows(DK, dk * (rho * sm_scale)[:, None], bhk, S, first, BN, D)
        else:
            _store_rows(DK, dk * sm_scale, bhk, S, first, BN, D)

    @gluon.jit
    def _row_scales(TAU, bhk, S, offs_n):
        """1/τ of the program's keys (`reference.dv_row_scale`), in the scores' key layout."""
        tau = gl.load(TAU + bhk.to(gl.int64) * S + offs_n)
        return gl.div_rn(gl.full_like(tau, 1.0), tau)

    @gluon.jit
    def _issue_sub_tile(j, c, bh, lo, descs, smems, ready, STAGES: gl.constexpr, BM: gl.constexpr, S,
                        STATS_ROWS: gl.constexpr, FP8_DK: gl.constexpr = False):
        """TMA of query sub-tile j of a loop (rows lo + j·BM of head bh) into stage (c + j) % STAGES:
        the Q8, dO8, QB, the queries' statistics and dO8ᵀ tiles."""
        q_desc, do_desc, qb_desc, dot_desc, st_desc = descs
        q_s, do_s, qb_s, dot_s, st_s = smems
        stage = (c + j) % STAGES
        bar = ready.index(stage)
        row = bh * S + lo + j * BM
        D: gl.constexpr = dot_desc.block_type.shape[0]
        nbytes: gl.constexpr = (2 * q_desc.block_type.nbytes + qb_desc.block_type.nbytes + st_desc.block_type.nbytes
                                + dot_desc.block_type.nbytes)
        mbarrier.expect(bar, nbytes)
        tma.async_copy_global_to_shared(q_desc, [row, 0], bar, q_s.index(stage))
        tma.async_copy_global_to_shared(do_desc, [row, 0], bar, do_s.index(stage))
        if FP8_DK:  # Q8ᵀ [B·Hq·D, S] in [D, BM] boxes, as dO8ᵀ
            tma.async_copy_global_to_shared(qb_desc, [bh * D, lo + j * BM], bar, qb_s.index(stage))
        else:
            tma.async_copy_global_to_shared(qb_desc, [row, 0], bar, qb_s.index(stage))
        tma.async_copy_global_to_shared(st_desc, [bh * STATS_ROWS, lo + j * BM], bar, st_s.index(stage))
        tma.async_copy_global_to_shared(dot_desc, [bh * D, lo + j * BM], bar, dot_s.index(stage))

    @gluon.jit
    def _refill(j, c, bh, lo, descs, smems, ready, STAGES: gl.constexpr, BM: gl.constexpr, S, STATS_ROWS: gl.constexpr):
        """`_issue_sub_tile` from the warps that read the stage's previous statistics with plain shared-memory loads
        (generic proxy), as the fused kernel does: those reads ordered before the TMA (async proxy) overwrites them."""
        fence_async_shared()
        _issue_sub_tile(j, c, bh, lo, descs, smems, ready, STAGES, BM, S, STATS_ROWS)

    @gluon.jit
    def _dkdv_smem(descs, k_desc, vr_desc, D: gl.constexpr, BM: gl.constexpr, STAGES: gl.constexpr,
                   STATS_ROWS: gl.constexpr):
        """Both dK/dV kernels' shared memory: K's and V's rows (the per-token ones, then the token-block copies) and
        the ring of query sub-tiles (Q8, dO8, QB, dO8ᵀ, the statistics: `smems`)."""
        q_desc, do_desc, qb_desc, dot_desc, st_desc = descs
        k_s = gl.allocate_shared_memory(k_desc.dtype, k_desc.block_type.shape, k_desc.layout)
        v_s = gl.allocate_shared_memory(vr_desc.dtype, vr_desc.block_type.shape, vr_desc.layout)
        q_s = gl.allocate_shared_memory(q_desc.dtype, [STAGES, BM, D], q_desc.layout)
        do_s = gl.allocate_shared_memory(do_desc.dtype, [STAGES, BM, D], do_desc.layout)
        qb_box: gl.constexpr = qb_desc.block_type.shape  # QB's [BM, D] rows, or (fp8_dk) Q8ᵀ's [D, BM] columns
        qb_s = gl.allocate_shared_memory(qb_desc.dtype, [STAGES, qb_box[0], qb_box[1]], qb_desc.layout)
        dot_s = gl.allocate_shared_memory(dot_desc.dtype, [STAGES, D, BM], dot_desc.layout)
        st_s = gl.allocate_shared_memory(st_desc.dtype, [STAGES, STATS_ROWS, BM], st_desc.layout)
        return k_s, v_s, (q_s, do_s, qb_s, dot_s, st_s)

    @gluon.jit
    def _dkdv_gluon_kernel(q_desc, do_desc, qb_desc, dot_desc, k_desc, kb_desc, vr_desc, vbr_desc, st_desc, KS, KBS,
                           VS, VBS, TAU, DK, DV, qk_scale, sm_scale, S, G, D: gl.constexpr, BN: gl.constexpr,
                           BM: gl.constexpr, TB: gl.constexpr, STAGES: gl.constexpr, STATS_ROWS: gl.constexpr):
        NW: gl.constexpr = BN // 16  # a warpgroup per 64 keys
        S_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, BM, 32])
        O_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, D, 16])
        O8_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, D, 32])
        A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_L, k_width=2)  # bf16 A from registers
        A8_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O8_L, k_width=4)  # fp8 A from registers
        KEY: gl.constexpr = gl.SliceLayout(1, S_L)
        QRY: gl.constexpr = gl.SliceLayout(0, S_L)

        pid_n = gl.program_id(0)
        bhk = gl.program_id(1)
        first = pid_n * BN
        t = first // TB
        rb = bhk.to(gl.int64) * (S // TB) + t
        offs_n = first + gl.arange(0, BN, layout=KEY)
        kv_offs = bhk.to(gl.int64) * S + offs_n

        descs = (q_desc, do_desc, qb_desc, dot_desc, st_desc)
        k_s, v_s, smems = _dkdv_smem(descs, k_desc, vr_desc, D, BM, STAGES, STATS_ROWS)
        ready, kv_bar = _init_ring(STAGES)

        # the diagonal: per-token K and V rows, queries of tile t from this program's first key
        mbarrier.expect(kv_bar, k_desc.block_type.nbytes + vr_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [bhk * S + first, 0], kv_bar, k_s)
        tma.async_copy_global_to_shared(vr_desc, [bhk * S + first, 0], kv_bar, v_s)
        ks = gl.load(KS + kv_offs)
        vs = gl.load(VS + kv_offs)
        itau = _row_scales(TAU, bhk, S, offs_n)
        dk = gl.zeros([BN, D], gl.float32, O_L)
        dv = gl.zeros([BN, D], gl.float32, O8_L)
        zero = gl.zeros([BN, BM], gl.float32, S_L)
        mbarrier.wait(kv_bar, 0)
        c = 0  # sub-tiles through the ring so far: stage and phase of the next one
        n_diag = ((t + 1) * TB - first) // BM
        for g in range(G):
            bh = bhk * G + g
            for j in range(n_diag):
                _refill(0, c, bh, first + j * BM, descs, smems, ready, STAGES, BM, S, STATS_ROWS)
                stage = c % STAGES
                offs_m = first + j * BM + gl.arange(0, BM, layout=QRY)
                mbarrier.wait(ready.index(stage), (c // STAGES) & 1)
                dv, dk = _diag_sub_tile(k_s, v_s, smems, stage, ks, vs, itau, itau, offs_n, offs_m, dv, dk, zero,
                                        qk_scale, QRY, A_L, A8_L, False)
                c += 1

        # off the diagonal: the token-block copies (every product on K and V has retired)
        mbarrier.expect(kv_bar, kb_desc.block_type.nbytes + vbr_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(kb_desc, [bhk * S + first, 0], kv_bar, k_s)
        tma.async_copy_global_to_shared(vbr_desc, [bhk * S + first, 0], kv_bar, v_s)
        kbs = gl.load(KBS + rb)
        vbs = gl.load(VBS + rb)
        mbarrier.wait(kv_bar, 1)
        lo = (t + 1) * TB
        n_off = (S - lo) // BM
        for g in range(G):
            bh = bhk * G + g
            if n_off > 0:
                for i in gl.static_range(STAGES):
                    if i < n_off:
                        _refill(i, c, bh, lo, descs, smems, ready, STAGES, BM, S, STATS_ROWS)
                dv, dk = _off_diagonal(c, n_off, k_s, v_s, smems, ready, ready, kbs, vbs, itau, itau, dv, dk, zero,
                                       qk_scale, bh, lo, descs, S, QRY, A_L, A8_L, STAGES, BM, STATS_ROWS, False)
                c += n_off

        _retire_ring(ready, kv_bar, STAGES)
        _store_dkdv(dv, dk, DK, DV, TAU, TAU, bhk, S, first, sm_scale, BN, D)


    @gluon.jit
    def _issue_key_sub_tile(j, n_off, kv_row, kt_row, descs, smems, ready, STAGES: gl.constexpr, BN: gl.constexpr,
                            FP8_DQ: gl.constexpr = False):
        """TMA of key sub-tile j of a dQ program (keys j·BN.. of its head) into stage j % STAGES: K's bytes,
        V's rows and K's bf16 copy (FP8_DQ: K's bytes K-major, K8ᵀ [B·Hkv·D, S] from row kt_row), the token-block
        copies' off the diagonal (j < n_off)."""
        k_desc, kb_desc, vr_desc, vbr_desc, kbf_desc, kbbf_desc = descs
        k_s, v_s, kbf_s = smems
        stage = j % STAGES
        bar = ready.index(stage)
        mbarrier.expect(bar, 2 * k_desc.block_type.nbytes + kbf_desc.block_type.nbytes)
        row = kv_row + j * BN
        if FP8_DQ:
            b_row = kt_row
            b_col = j * BN
        else:
            b_row = row
            b_col = 0
        if j < n_off:
            tma.async_copy_global_to_shared(kb_desc, [row, 0], bar, k_s.index(stage))
            tma.async_copy_global_to_shared(vbr_desc, [row, 0], bar, v_s.index(stage))
            tma.async_copy_global_to_shared(kbbf_desc, [b_row, b_col], bar, kbf_s.index(stage))
        else:
            tma.async_copy_global_to_shared(k_desc, [row, 0], bar, k_s.index(stage))
            tma.async_copy_global_to_shared(vr_desc, [row, 0], bar, v_s.index(stage))
            tma.async_copy_global_to_shared(kbf_desc, [b_row, b_col], bar, kbf_s.index(stage))

    @gluon.jit
    def _dq_scores(q_s, do_s, k_s, v_s, ready, j, zero, STAGES: gl.constexpr):
        """S = Q8·K8ᵀ and dP = dO8·V8ᵀ of key sub-tile j (FP8 products from its ring stage), waited for."""
        stage = j % STAGES
        mbarrier.wait(ready.index(stage), (j // STAGES) & 1)
        s, dp = _fresh_products(q_s, k_s.index(stage), do_s, v_s.index(stage), zero)
        return warpgroup_mma_wait(num_outstanding=0, deps=(s, dp))

    @gluon.jit
    def _dq_add(dq, y, j, n_off, n_all, kv_row, kt_row, descs, smems, ready, STAGES: gl.constexpr,
                BN: gl.constexpr, FP8_DQ: gl.constexpr = False):
        """dQ += y·K (bf16 K of sub-tile j's stage, or FP8_DQ its K8ᵀ tile), waited for; then the stage, free, takes
        sub-tile j + STAGES."""
        if FP8_DQ:
            dq = warpgroup_mma(y, smems[2].index(j % STAGES).permute((1, 0)), dq, is_async=True)
        else:
            dq = warpgroup_mma(y, smems[2].index(j % STAGES), dq, is_async=True)
        dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq,))
        if j + STAGES < n_all:  # every product reading sub-tile j's stage has retired
            _issue_key_sub_tile(j + STAGES, n_off, kv_row, kt_row, descs, smems, ready, STAGES, BN, FP8_DQ)
        return dq

    @gluon.jit
    def _dq_gluon_kernel(q_desc, do_desc, k_desc, kb_desc, vr_desc, vbr_desc, kbf_desc, kbbf_desc, QS, LSE2, MOFF,
                         DELTA, DOS, KS, KBS, VS, VBS, SIG, DQ, qk_scale, sm_scale, S, G, D: gl.constexpr,
                         BM: gl.constexpr, BN: gl.constexpr, TB: gl.constexpr, STAGES: gl.constexpr,
                         FP8_DQ: gl.constexpr = False):
        """dQ of BM query rows (`attention_bwd._dq_kernel` at the fast path's launch, the same products and
        elementwise expressions). Each key sub-tile's products are waited for as soon as they are issued,
        as in the forward's chained variant, so that a program fits MAXNREG_DQ[BN] registers and four (BN = 32)
        run per SM: with S and dP of the next sub-tile in flight it needed 203 and ran slower (f61bd6d)."""
        NW: gl.constexpr = BM // 16  # a warpgroup per 64 rows
        S_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, BN, 32])
        if FP8_DQ:  # the dQ product in FP8 (launch option fp8_dq): A = E4M3(dS·s_k/ρ), B = K8ᵀ
            O_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                          instr_shape=[16, D, 32])
            A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_L, k_width=4)
            A_T: gl.constexpr = gl.float8e4nv
        else:
            O_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                          instr_shape=[16, D, 16])
            A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_L, k_width=2)  # bf16 A from registers
            A_T: gl.constexpr = gl.bfloat16
        ROW: gl.constexpr = gl.SliceLayout(1, S_L)
        COL: gl.constexpr = gl.SliceLayout(0, S_L)

        pid_m = gl.num_programs(0) - 1 - gl.program_id(0)  # longest causal rows first
        bh = gl.program_id(1)
        bhk = bh // G
        first = pid_m * BM
        tile = first // TB * TB  # the forward's key tile holding these rows: per-token K, V there
        n_off = tile // BN
        n_all = (first + BM) // BN  # causal: the diagonal tile's keys up to the last row
        kv_off = bhk.to(gl.int64) * S
        kvb_off = bhk.to(gl.int64) * (S // TB)

        q_s = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
        do_s = gl.allocate_shared_memory(do_desc.dtype, do_desc.block_type.shape, do_desc.layout)
        k_s = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BN, D], k_desc.layout)
        v_s = gl.allocate_shared_memory(vr_desc.dtype, [STAGES, BN, D], vr_desc.layout)
        kbf_box: gl.constexpr = kbf_desc.block_type.shape  # K's bf16 [BN, D] rows, or (FP8_DQ) K8ᵀ's [D, BN] columns
        kbf_s = gl.allocate_shared_memory(kbf_desc.dtype, [STAGES, kbf_box[0], kbf_box[1]], kbf_desc.layout)
        ready, q_bar = _init_ring(STAGES)
        descs = (k_desc, kb_desc, vr_desc, vbr_desc, kbf_desc, kbbf_desc)
        smems = (k_s, v_s, kbf_s)

        mbarrier.expect(q_bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [bh * S + first, 0], q_bar, q_s)
        tma.async_copy_global_to_shared(do_desc, [bh * S + first, 0], q_bar, do_s)
        kt_row = bhk * D  # K8ᵀ's first row of this head (FP8_DQ)
        for i in gl.static_range(STAGES):
            if i < n_all:
                _issue_key_sub_tile(i, n_off, bhk * S, kt_row, descs, smems, ready, STAGES, BN, FP8_DQ)
        offs_m = first + gl.arange(0, BM, layout=ROW)
        rows = bh.to(gl.int64) * S + offs_m
        qs = gl.load(QS + rows) * qk_scale
        lse2 = gl.load(LSE2 + rows)
        m = gl.floor(lse2) - gl.load(MOFF + rows).to(gl.float32)
        linv = gl.exp2(m - lse2)
        if FP8_DQ:  # 1/ρ folded into 1/l: a power of two, so every product below is the same up to that factor
            rho = gl.load(SIG + rows)
            linv = linv * gl.div_rn(gl.full_like(rho, 1.0), rho)
        delta = gl.load(DELTA + rows)
        sdo = gl.load(DOS + rows)
        dq = gl.zeros([BM, D], gl.float32, O_L)
        zero = gl.zeros([BM, BN], gl.float32, S_L)
        mbarrier.wait(q_bar, 0)

        # off the diagonal: the token-block copies, one K and one V scale per tile (loaded before the
        # products are issued, so their latency hides behind them)
        for j in range(0, n_off):
            kbs = gl.load(KBS + kvb_off + j * BN // TB)
            vbs = gl.load(VBS + kvb_off + j * BN // TB)
            s, dp = _dq_scores(q_s, do_s, k_s, v_s, ready, j, zero, STAGES)
            s = s * (qs * kbs)[:, None]
            p = gl.exp2(s - (m - 8.0)[:, None])
            dp = dp * (sdo * vbs)[:, None]
            ds = (p * (linv * (1.0 / 256.0))[:, None]) * (dp - delta[:, None])
            y = gl.convert_layout((ds * kbs).to(A_T), A_L)
            dq = _dq_add(dq, y, j, n_off, n_all, bhk * S, kt_row, descs, smems, ready, STAGES, BN, FP8_DQ)
        # the diagonal tile: per-token K and V, causal
        for j in range(n_off, n_all):
            cols = j * BN + gl.arange(0, BN, layout=COL)
            ks = gl.load(KS + kv_off + cols)
            vs = gl.load(VS + kv_off + cols)
            s, dp = _dq_scores(q_s, do_s, k_s, v_s, ready, j, zero, STAGES)
            s = s * (qs[:, None] * ks[None, :])
            s = gl.where(offs_m[:, None] >= cols[None, :], s, float("-inf"))
            p = gl.exp2(s - (m - 8.0)[:, None])
            dp = dp * (sdo[:, None] * vs[None, :])
            ds = (p * (linv * (1.0 / 256.0))[:, None]) * (dp - delta[:, None])
            y = gl.convert_layout((ds * ks[None, :]).to(A_T), A_L)
            dq = _dq_add(dq, y, j, n_off, n_all, bhk * S, kt_row, descs, smems, ready, STAGES, BN, FP8_DQ)

        _retire_ring(ready, q_bar, STAGES)
        offs_r = first + gl.arange(0, BM, layout=gl.SliceLayout(1, O_L))
        offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, O_L))
        out = (bh.to(gl.int64) * S + offs_r.to(gl.int64))[:, None] * D + offs_d[None, :]
        if FP8_DQ:
            rho_o = gl.load(SIG + bh.to(gl.int64) * S + offs_r)
            gl.store(DQ + out, (dq * (rho_o * sm_scale)[:, None]).to(gl.bfloat16))
        else:
            gl.store(DQ + out, (dq * sm_scale).to(gl.bfloat16))


def _rows_desc(t, rows: int, dtype):
    """A TMA descriptor over t as a 2-D row view [-1, D] in [rows, D] boxes (both kernels' operands)."""
    d = t.shape[-1]
    return TensorDescriptor.from_tensor(t.reshape(-1, d), [rows, d],
                                        nvmma_layout((rows, d), dtype))


def _cols_desc(t, cols: int, dtype):
    """A TMA descriptor over t [..., D, S] (a K-major copy) as a 2-D view [-1, S] in [D, cols] boxes."""
    d = t.shape[-2]
    return TensorDescriptor.from_tensor(t.reshape(-1, t.shape[-1]), [d, cols],
                                        nvmma_layout((d, cols), dtype))


def ds_buffer_bytes(seq: int, fp8: bool = False) -> int:
    """Bytes of one query head's share of the dS buffer (`ds_buffer`): S² + DS_QB·S in bf16, half that in fp8."""
    n_qb = seq // DS_QB
    return n_qb * (n_qb + 1) * BN * DS_QB * (1 if fp8 else 2)


def ds_buffer(b: int, hq: int, seq: int, device, fp8: bool = False) -> torch.Tensor:
    """The dS buffer of launch option `ds_out`: for each query head, each block of DS_QB queries and each of the
    2·(qb + 1) key blocks of BN up to its diagonal, one [BN, DS_QB] tile of dS·s_k with the keys as rows (the
    dK/dV kernel's orientation), the tiles of query block qb after those of blocks 0..qb − 1 (qb(qb + 1) of them).
    Causal, so half the square: S² bytes a head in bf16. fp8 (with launch option fp8_dq): E4M3(dS·s_k/ρ), S²/2
    bytes, each tile [DS_QB, BN] with the queries as rows (the FP8 dQ product's A operand, K-major), the keys of each
    16 in `DS_KEY_ORDER`."""
    n_qb = seq // DS_QB
    if fp8:
        return torch.empty(b * hq * n_qb * (n_qb + 1) * DS_QB, BN, dtype=torch.float8_e4m3fn, device=device)
    return torch.empty(b * hq * n_qb * (n_qb + 1) * BN, DS_QB, dtype=torch.bfloat16, device=device)


def ds_descriptor(buf: torch.Tensor, keys: int, queries: int):
    """A TMA descriptor over the dS buffer in boxes of a dK/dV sub-tile's keys × queries: [keys, queries] in a bf16
    buffer, [queries, keys / 2] 16-bit words of two keys' E4M3 bytes in an fp8 one (`ds_buffer`, `_store_ds`)."""
    if buf.dtype == torch.float8_e4m3fn:
        return TensorDescriptor.from_tensor(buf.view(torch.int16), [queries, keys // 2],
                                            nvmma_layout((queries, keys // 2), gl.int16))
    return TensorDescriptor.from_tensor(buf, [keys, queries], nvmma_layout((keys, queries), gl.bfloat16))


# the statistics' boxes, unswizzled: each row is read as one vector
_PLAIN_STATS_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2) if HAS_GLUON else None


def descriptors(q, k, do, qb, dot, vr, vbr, stats):
    """TMA descriptors over 2-D row views ([rows, D]): the query side in [BM, D] sub-tiles (Q8, dO8 and
    the bf16 copy QB), dO8ᵀ ([B·Hq·D, S], the FP8 dV product's B operand) in [D, BM] boxes, the key side in
    [BN, D] tiles (K8, its token-block copy, V's rows and the copy's rows, `attention_bwd_copies`); the
    queries' statistics (`attention_bwd_copies.query_stats`, [B·Hq·STATS_ROWS, S]) in [STATS_ROWS, BM] boxes,
    unswizzled: each row is read as one vector."""
    f8, bf, desc = gl.float8e4nv, gl.bfloat16, _rows_desc
    plain = _PLAIN_STATS_LAYOUT
    st = TensorDescriptor.from_tensor(stats.reshape(-1, stats.shape[-1]), [STATS_ROWS, BM], plain)
    return (desc(q.vals, BM, f8), desc(do.vals, BM, f8), desc(qb, BM, bf), _cols_desc(dot, BM, f8),
            desc(k.vals, BN, f8), desc(k.vals if k.off.vals is None else k.off.vals, BN, f8), desc(vr, BN, f8),
            desc(vbr, BN, f8), st)  # a deferred K copy: derived in the ws dK/dV kernel (fold_k), its descriptor unread


# Gluon kernels are launched eagerly: torch.compile's support for user Triton kernels covers
# tl-JIT functions, not Gluon's TMA-descriptor launches (never exercised here), so Dynamo
# breaks the graph at this call instead of tracing it.
@torch.compiler.disable
def dkdv(q, k, v, do, copies, stats, tau, sm_scale: float):
    """dK, dV [B, Hkv, S, D] bf16 for the cases `eligible` accepts (`attention_bwd.backward`'s operands;
    copies: `attention_bwd_copies.bf16_copies`' (QB, dO8ᵀ, KBF, KBBF, VR, VBR), dO8ᵀ [B, Hq, D, S] being dO's
    bytes K-major; stats: the queries' statistics it filled, `attention_bwd_copies.query_stats`; tau [B, Hkv, S]:
    the keys' dV row scales, `reference.dv_row_scale`)."""
    b, hq, seq, d = q.vals.shape
    hkv = k.vals.shape[1]
    qb, dot, _, _, vr, vbr = copies
    dk = torch.empty(b, hkv, seq, d, dtype=torch.bfloat16, device=q.vals.device)
    dv = torch.empty_like(dk)
    _dkdv_gluon_kernel[(seq // BN, b * hkv)](
        *descriptors(q, k, do, qb, dot, vr, vbr, stats), k.scale, k.off.scale, v.scale, v.off.scale, tau, dk, dv,
        sm_scale * 1.4426950408889634, sm_scale, seq, hq // hkv, D=d, BN=BN, BM=BM, TB=TB, STAGES=STAGES,
        STATS_ROWS=STATS_ROWS, num_warps=warps_for(BN),
    )
    return dk, dv


# query rows per dQ program: a warpgroup (wgmma M = 64) per 64 rows; 128 gained nothing (2.22-2.25 ms against
# 2.16-2.22 at S = 8k, session11_wide.sh)
DQ_BM = 64
# Per key sub-tile (launch option gluon_dq): ring stages and registers. 32 keys: four programs per SM (65536
# registers / (4 × 128 threads) = 128, 60 B of spills, 3 local loads a sub-tile; shared memory 4 × (Q's and dO's
# 8 KB each + 2 stages × 16 KB) = 192 KB): 2157-2169 µs against 2253-2294 at three per SM (168 registers, 3
# stages) at S = 8k, B×H = 64 on the H200 (session10_dqregs.sh). 64 keys: three per SM (65536 / (3 × 128),
# rounded down to a multiple of 8), as 128 registers would spill its [64, 64] products.
DQ_STAGES = {32: 2, 64: 3}
MAXNREG_DQ = {32: 128, 64: 168}


# launched through `relaunch.Relaunch`: Triton's launch path once per plan, the compiled launcher after that
_DQ_LAUNCH = Relaunch(_dq_gluon_kernel) if HAS_GLUON else None


def dq_eligible(q, k, v, spec, causal: bool, doc, cfg: dict) -> str | None:
    """None when the Gluon dQ kernel can run this backward under launch `cfg`, else why not."""
    ours = cfg.get("pre") and cfg.get("bm") == FAST_BM and cfg.get("dq") == "kernel"
    return _unsupported(q, k, v, spec, causal, doc,
                        None if ours else "the fast path's launch only (pre, bm = 64, dQ by its own kernel)")


def dq_descriptors(q, k, do, copies, bn: int):
    """TMA descriptors of the dQ kernel: Q8 and dO8 in [DQ_BM, D] tiles, K8, its token-block copy, V's rows,
    the copy's rows and K's bf16 copies (`attention_bwd_copies`) in [bn, D] key sub-tiles."""
    _, _, kbf, kbbf, vr, vbr = copies
    f8, bf, desc = gl.float8e4nv, gl.bfloat16, _rows_desc
    return (desc(q.vals, DQ_BM, f8), desc(do.vals, DQ_BM, f8), desc(k.vals, bn, f8), desc(k.off.vals, bn, f8),
            desc(vr, bn, f8), desc(vbr, bn, f8), desc(kbf, bn, bf), desc(kbbf, bn, bf))


@torch.compiler.disable
def dq(q, k, v, do, lse2, moff, delta, copies, sm_scale: float, bn: int = 64, fp8_dq=None):
    """dQ [B, Hq, S, D] bf16 for the cases `dq_eligible` accepts (`attention_bwd.backward`'s operands;
    copies: `attention_bwd_copies.bf16_copies`' (QB, dO8ᵀ, KBF, KBBF, VR, VBR)); bn: keys per sub-tile (32
    or 64; the products' sums run in the same order either way). fp8_dq (launch option fp8_dq, a probe): (K8ᵀ, its
    token-block copy's bytes K-major, both [B, Hkv, D, S], ρ [B, Hq, S]) to run the dQ product in FP8 under the
    queries' bound scales (`reference.dq_row_scale`) in place of copies' bf16 K."""
    if bn not in (32, 64):
        raise ValueError(f"gluon dQ key sub-tile {bn}: allowed 32 or 64")
    b, hq, seq, d = q.vals.shape
    hkv = k.vals.shape[1]
    out = torch.empty(b, hq, seq, d, dtype=torch.bfloat16, device=q.vals.device)
    descs = list(dq_descriptors(q, k, do, copies, bn))
    rho = lse2  # unread without fp8_dq
    if fp8_dq is not None:
        k8t, kb8t, rho = fp8_dq
        descs[6:8] = [_cols_desc(k8t, bn, gl.float8e4nv), _cols_desc(kb8t, bn, gl.float8e4nv)]
    _DQ_LAUNCH(
        (seq // DQ_BM, b * hq),
        (*descs, q.scale, lse2, moff, delta, do.scale, k.scale, k.off.scale, v.scale, v.off.scale, rho, out,
         sm_scale * 1.4426950408889634, sm_scale, seq, hq // hkv),
        dict(D=d, BM=DQ_BM, BN=bn, TB=TB, STAGES=DQ_STAGES[bn], FP8_DQ=fp8_dq is not None),
        dict(num_warps=warps_for(DQ_BM), maxnreg=MAXNREG_DQ[bn]),
    )
    return out
