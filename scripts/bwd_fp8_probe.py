"""Timing probe: the warp-specialized dK/dV kernel with its dV and / or dK products in FP8 (wrong numbers, real work).

    python scripts/bwd_fp8_probe.py --compile            # CPU: registers, spills, serialization of each variant
    python scripts/bwd_fp8_probe.py --seq 8192 --rounds 5  # GPU: kernel time of each variant, interleaved rounds

Why: the fp8 fast path's dK/dV kernel runs two of its four products a sub-tile on bf16 tensor cores (dV = Pᵀ·dOb,
dK = dSᵀ·Qb), which is half its tensor-core time (docs/kernels.md, open item 1). Running them in FP8 needs new
numerics — dV's A operand re-quantized with one scale per K/V head (P·s_dO / max s_dO in [0, 1], ×256 as the
forward's P), dK's dSᵀ quantized per key row with a scale constant along the row (so that one accumulator chains
every sub-tile) — and K-major FP8 B operands (Q8ᵀ, dO8ᵀ copies, [D, S] bytes). Before building that through the
reference, the Triton kernels and the copies pass, this measures what it would buy: `attention_dkdv_ws`'s kernel
with those products swapped for FP8 ones of the same shapes, fed from transposed byte copies, with the elementwise
work the FP8 operands need (dV: one multiply by a per-query factor; dK: a per-row amax over the sub-tile, a running
max and one multiply per element; the rare rescale of dK when a row's running scale grows is left out). The
outputs are not dK and dV (no reference would match them); the baseline is the real kernel on the same inputs.
Measured at commit 122df71 (session 16: FP8 dV −11%, FP8 dK +15%, docs/benchmarks.md), against that commit's
kernels: the FP8 dV product has been the kernels' own since b78f129, so run it from a checkout of 122df71 (`git
worktree add /tmp/probe 122df71`). Never imported by the package.
"""
from __future__ import annotations

import argparse
import os
import statistics

os.environ.pop("TRITON_INTERPRET", None)  # Gluon compiles for a GPU target only; before triton is imported

import torch  # noqa: E402
from kernel_registers import compile_gluon, import_for_gpu, ptxas_report  # noqa: E402

import_for_gpu()
from flamia_kernels import attention_bwd_gluon as G  # noqa: E402
from flamia_kernels import attention_dkdv_ws as W  # noqa: E402
from flamia_kernels.attention_bwd_copies import STATS_ROWS  # noqa: E402
from flamia_kernels.attention_bwd_gluon import (  # noqa: E402
    _fold_rows,
    _fresh_products,
    _query_stats,
    _release,
    _store_dkdv,
)
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402

VARIANTS = {"base": (False, False), "fp8dv": (True, False), "fp8dk": (False, True), "fp8both": (True, True)}


@gluon.jit
def _issue(c, bh, lo, descs, smems, ready, empty, S, D: gl.constexpr, STAGES: gl.constexpr, WITH_DOB: gl.constexpr,
           STATS_ROWS: gl.constexpr, FP8_DV: gl.constexpr, FP8_DK: gl.constexpr):
    """Sub-tile c (rows lo.. of head bh) into its stage once released: Q8, dO8, the statistics, the dK product's B
    (QB rows, or FP8_DK Q8ᵀ columns) and the dV product's (DOB rows, or FP8_DV dO8ᵀ columns)."""
    q_desc, do_desc, qb_desc, dob_desc, st_desc = descs
    q_s, do_s, qb_s, dob_s, st_s = smems
    stage = c % STAGES
    mbarrier.wait(empty.index(stage), ((c // STAGES) & 1) ^ 1)
    bar = ready.index(stage)
    row = bh * S + lo
    nbytes: gl.constexpr = (2 * q_desc.block_type.nbytes + qb_desc.block_type.nbytes + st_desc.block_type.nbytes
                            + (dob_desc.block_type.nbytes if WITH_DOB else 0))
    mbarrier.expect(bar, nbytes)
    tma.async_copy_global_to_shared(q_desc, [row, 0], bar, q_s.index(stage))
    tma.async_copy_global_to_shared(do_desc, [row, 0], bar, do_s.index(stage))
    if FP8_DK:
        tma.async_copy_global_to_shared(qb_desc, [bh * D, lo], bar, qb_s.index(stage))
    else:
        tma.async_copy_global_to_shared(qb_desc, [row, 0], bar, qb_s.index(stage))
    tma.async_copy_global_to_shared(st_desc, [bh * STATS_ROWS, lo], bar, st_s.index(stage))
    if WITH_DOB:
        if FP8_DV:
            tma.async_copy_global_to_shared(dob_desc, [bh * D, lo], bar, dob_s.index(stage))
        else:
            tma.async_copy_global_to_shared(dob_desc, [row, 0], bar, dob_s.index(stage))


@gluon.jit
def _producer(descs, kv_descs, smems, k_s, v_s, ready, empty, kv_ready, kv_free, S, G_, D: gl.constexpr,
              BN: gl.constexpr, BM: gl.constexpr, TB: gl.constexpr, STAGES: gl.constexpr, STATS_ROWS: gl.constexpr,
              FP8_DV: gl.constexpr, FP8_DK: gl.constexpr):
    k_desc, kb_desc, vr_desc, vbr_desc = kv_descs
    first = gl.program_id(0) * BN
    bhk = gl.program_id(1)
    t = first // TB
    mbarrier.expect(kv_ready, k_desc.block_type.nbytes + vr_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [bhk * S + first, 0], kv_ready, k_s)
    tma.async_copy_global_to_shared(vr_desc, [bhk * S + first, 0], kv_ready, v_s)
    c = 0
    n_diag = ((t + 1) * TB - first) // BM
    for g in range(G_):
        for j in range(n_diag):
            _issue(c, bhk * G_ + g, first + j * BM, descs, smems, ready, empty, S, D, STAGES, FP8_DV, STATS_ROWS,
                   FP8_DV, FP8_DK)
            c += 1
    mbarrier.wait(kv_free, 0)
    mbarrier.expect(kv_ready, kb_desc.block_type.nbytes + vbr_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(kb_desc, [bhk * S + first, 0], kv_ready, k_s)
    tma.async_copy_global_to_shared(vbr_desc, [bhk * S + first, 0], kv_ready, v_s)
    lo0 = (t + 1) * TB
    for g in range(G_):
        for j in range((S - lo0) // BM):
            _issue(c, bhk * G_ + g, lo0 + j * BM, descs, smems, ready, empty, S, D, STAGES, True, STATS_ROWS, FP8_DV,
                   FP8_DK)
            c += 1


@gluon.jit
def _dk_operand(dst, qs, tau, FP8_DK: gl.constexpr, A_L: gl.constexpr, A8_L: gl.constexpr):
    """dK's A operand: bf16(dSᵀ·s_q) as the kernel has it, or (FP8_DK) E4M3 of it over a per-key running amax."""
    x = dst * qs[None, :]
    if FP8_DK:
        tau = gl.maximum(tau, gl.max(gl.abs(x), 1))
        y = gl.convert_layout((x * gl.div_rn(gl.full_like(tau, 448.0), tau)[:, None]).to(gl.float8e4nv), A8_L)
    else:
        y = gl.convert_layout(x.to(gl.bfloat16), A_L)
    return y, tau


@gluon.jit
def _dst(pt, dpt, sv, linv, delta, sdo):
    dpt = dpt * (sv * sdo[None, :])
    return (pt * (linv * (1.0 / 256.0))[None, :]) * (dpt - delta[None, :])


@gluon.jit
def _sub_tile(st, dpt, smems, stage, dobd_s, sk, sv, qk_scale, keep, r, dv, dk, tau, DIAG: gl.constexpr,
              QRY: gl.constexpr, A_L: gl.constexpr, A8_L: gl.constexpr, BLK: gl.constexpr, FP8_DV: gl.constexpr,
              FP8_DK: gl.constexpr):
    """dV and dK of one sub-tile from its Sᵀ, dPᵀ (sk, sv: [BN, 1] per-token scales on the diagonal, scalars off it),
    issued, not waited for."""
    q_s, do_s, qb_s, dob_s, st_s = smems
    qs, m, linv, delta, sdo = _query_stats(st_s.index(stage), QRY)
    st = st * (sk * (qs * qk_scale)[None, :])
    if DIAG:
        st = gl.where(keep, st, float("-inf"))
    pt = gl.exp2(st - (m - 8.0)[None, :])
    if FP8_DV:  # P·s_dO / max s_dO, ×256: one factor per query (the max folded into it here)
        y8 = gl.convert_layout((pt * (linv * sdo)[None, :]).to(gl.float8e4nv), A8_L)
        dv = warpgroup_mma(y8, dob_s.index(stage).permute((1, 0)), dv, is_async=True)
    elif DIAG:  # the kernel's diagonal: V's scale folded into P, the dO rows scaled into the program's own tile
        xt = pt * sv * gl.div_rn(gl.full_like(r, 1.0), r)[None, :]
        pq = gl.convert_layout(xt.to(gl.float8e4nv).to(gl.bfloat16), A_L)
        w = r * gl.full_like(r, 1.0 / 256.0) * sdo * linv
        do_rows = do_s.index(stage).load(BLK).to(gl.float32)
        dobd_s.store((do_rows * gl.convert_layout(w, gl.SliceLayout(1, BLK))[:, None]).to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()
        dv = warpgroup_mma(pq, dobd_s, dv, is_async=True)
    else:
        pq = gl.convert_layout(pt.to(gl.float8e4nv).to(gl.bfloat16), A_L)
        dv = warpgroup_mma(pq, dob_s.index(stage), dv, is_async=True)
    ds, tau = _dk_operand(_dst(pt, dpt, sv, linv, delta, sdo), qs, tau, FP8_DK, A_L, A8_L)
    if FP8_DK:
        dk = warpgroup_mma(ds, qb_s.index(stage).permute((1, 0)), dk, is_async=True)
    else:
        dk = warpgroup_mma(ds, qb_s.index(stage), dk, is_async=True)
    return dv, dk, tau


@gluon.jit
def _consumer(smems, k_s, v_s, dobd_s, ready, empty, kv_ready, kv_free, KS, KBS, VS, VBS, RD, RB, DK, DV, qk_scale,
              sm_scale, S, G_, D: gl.constexpr, BN: gl.constexpr, BM: gl.constexpr, TB: gl.constexpr,
              STAGES: gl.constexpr, FP8_DV: gl.constexpr, FP8_DK: gl.constexpr):
    NW: gl.constexpr = BN // 16
    S_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, BM, 32])
    O_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, D, 16])
    O8_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, D, 32])
    A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_L, k_width=2)
    A8_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O8_L, k_width=4)
    KEY: gl.constexpr = gl.SliceLayout(1, S_L)
    QRY: gl.constexpr = gl.SliceLayout(0, S_L)
    BLK: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [NW, 1], [1, 0])
    DV_L: gl.constexpr = O8_L if FP8_DV else O_L
    DK_L: gl.constexpr = O8_L if FP8_DK else O_L

    first = gl.program_id(0) * BN
    bhk = gl.program_id(1)
    t = first // TB
    rb = bhk.to(gl.int64) * (S // TB) + t
    offs_n = first + gl.arange(0, BN, layout=KEY)
    kv_offs = bhk.to(gl.int64) * S + offs_n
    ks = gl.load(KS + kv_offs)
    vs = gl.load(VS + kv_offs)
    dk = gl.zeros([BN, D], gl.float32, DK_L)
    dv = gl.zeros([BN, D], gl.float32, DV_L)
    tau = gl.full([BN], 1e-30, gl.float32, KEY)
    zero = gl.zeros([BN, BM], gl.float32, S_L)
    mbarrier.wait(kv_ready, 0)
    c = 0
    n_diag = ((t + 1) * TB - first) // BM
    for _g in range(G_):
        for j in range(n_diag):
            stage = c % STAGES
            offs_m = first + j * BM + gl.arange(0, BM, layout=QRY)
            r = _fold_rows(RD, RB, rb, bhk, S, offs_m, True, BM, QRY)
            mbarrier.wait(ready.index(stage), (c // STAGES) & 1)
            q_s, do_s = smems[0], smems[1]
            st, dpt = _fresh_products(k_s, q_s.index(stage), v_s, do_s.index(stage), zero)
            st, dpt = warpgroup_mma_wait(num_outstanding=0, deps=(st, dpt))
            keep = offs_n[:, None] <= offs_m[None, :]
            dv, dk, tau = _sub_tile(st, dpt, smems, stage, dobd_s, ks[:, None], vs[:, None], qk_scale, keep, r, dv,
                                    dk, tau, True, QRY, A_L, A8_L, BLK, FP8_DV, FP8_DK)
            dv, dk = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk))
            _release(empty, stage)
            c += 1
    if not FP8_DV:
        dv = dv * gl.convert_layout(gl.div_rn(gl.full([BN], 1.0, gl.float32, KEY), vs),
                                    gl.SliceLayout(1, DV_L))[:, None]
    mbarrier.arrive(kv_free, count=1)
    kbs = gl.load(KBS + rb)
    vbs = gl.load(VBS + rb)
    mbarrier.wait(kv_ready, 1)
    n_off = (S - (t + 1) * TB) // BM
    for _g in range(G_):
        if n_off > 0:
            q_s, do_s = smems[0], smems[1]
            stage = c % STAGES
            mbarrier.wait(ready.index(stage), (c // STAGES) & 1)
            st, dpt = _fresh_products(k_s, q_s.index(stage), v_s, do_s.index(stage), zero)
            st, dpt = warpgroup_mma_wait(num_outstanding=0, deps=(st, dpt))
            for j in range(0, n_off - 1):
                stage = (c + j) % STAGES
                nxt = (c + j + 1) % STAGES
                mbarrier.wait(ready.index(nxt), ((c + j + 1) // STAGES) & 1)
                st_n, dpt_n = _fresh_products(k_s, q_s.index(nxt), v_s, do_s.index(nxt), zero)
                dv, dk, tau = _sub_tile(st, dpt, smems, stage, dobd_s, kbs, vbs, qk_scale, 0, 0, dv, dk, tau, False,
                                        QRY, A_L, A8_L, BLK, FP8_DV, FP8_DK)
                st, dpt, dv, dk = warpgroup_mma_wait(num_outstanding=0, deps=(st_n, dpt_n, dv, dk))
                _release(empty, stage)
            stage = (c + n_off - 1) % STAGES
            dv, dk, tau = _sub_tile(st, dpt, smems, stage, dobd_s, kbs, vbs, qk_scale, 0, 0, dv, dk, tau, False,
                                    QRY, A_L, A8_L, BLK, FP8_DV, FP8_DK)
            dv, dk = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk))
            _release(empty, stage)
            c += n_off
    if FP8_DK:  # the running scales, as a kernel would apply them at the end
        dk = dk * gl.convert_layout(tau * (1.0 / 448.0), gl.SliceLayout(1, DK_L))[:, None]
    _store_dkdv(dv, gl.convert_layout(dk, DV_L), DK, DV, bhk, S, first, sm_scale, BN, D)


@gluon.jit
def _probe_kernel(q_desc, do_desc, qb_desc, dob_desc, k_desc, kb_desc, vr_desc, vbr_desc, st_desc, KS, KBS, VS, VBS,
                  RD, RB, DK, DV, qk_scale, sm_scale, S, G_, D: gl.constexpr, BN: gl.constexpr, BM: gl.constexpr,
                  TB: gl.constexpr, STAGES: gl.constexpr, STATS_ROWS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                  FP8_DV: gl.constexpr, FP8_DK: gl.constexpr):
    k_s = gl.allocate_shared_memory(k_desc.dtype, k_desc.block_type.shape, k_desc.layout)
    v_s = gl.allocate_shared_memory(vr_desc.dtype, vr_desc.block_type.shape, vr_desc.layout)
    q_s = gl.allocate_shared_memory(q_desc.dtype, [STAGES, BM, D], q_desc.layout)
    do_s = gl.allocate_shared_memory(do_desc.dtype, [STAGES, BM, D], do_desc.layout)
    qb_s = gl.allocate_shared_memory(qb_desc.dtype, [STAGES] + qb_desc.block_type.shape, qb_desc.layout)
    dob_s = gl.allocate_shared_memory(dob_desc.dtype, [STAGES] + dob_desc.block_type.shape, dob_desc.layout)
    if FP8_DV:
        dobd_s = dob_s  # unused: the diagonal's dV reads the stage's dO8ᵀ like every sub-tile
    else:
        dobd_s = gl.allocate_shared_memory(dob_desc.dtype, [BM, D], dob_desc.layout)
    st_s = gl.allocate_shared_memory(st_desc.dtype, [STAGES, STATS_ROWS, BM], st_desc.layout)
    smems = (q_s, do_s, qb_s, dob_s, st_s)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    kv_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    mbarrier.init(kv_ready, count=1)
    mbarrier.init(kv_free, count=1)
    gl.warp_specialize([
        (_consumer, (smems, k_s, v_s, dobd_s, ready, empty, kv_ready, kv_free, KS, KBS, VS, VBS, RD, RB, DK, DV,
                     qk_scale, sm_scale, S, G_, D, BN, BM, TB, STAGES, FP8_DV, FP8_DK)),
        (_producer, ((q_desc, do_desc, qb_desc, dob_desc, st_desc), (k_desc, kb_desc, vr_desc, vbr_desc), smems, k_s,
                     v_s, ready, empty, kv_ready, kv_free, S, G_, D, BN, BM, TB, STAGES, STATS_ROWS, FP8_DV,
                     FP8_DK))],
        [1], [PRODUCER_REGS])


def _cols_desc(t, d: int, bm: int):
    """[D, BM] boxes over t's bytes seen as [B·H·D, S] (a transposed copy's layout)."""
    flat = t.reshape(-1, t.shape[-1])
    return TensorDescriptor.from_tensor(flat, [d, bm], gl.NVMMASharedLayout.get_default_for([d, bm], gl.float8e4nv))


def operands(b: int, h: int, seq: int, device):
    """Inputs of the dK/dV kernel with the shapes and dtypes the fast path gives it (values random, statistics in
    their ranges), plus the transposed byte copies the FP8 products read."""
    d, f8 = G.TB, torch.float8_e4m3fn
    gen = torch.Generator(device="cpu").manual_seed(0)

    def bytes_(*shape):
        return (torch.randn(*shape, generator=gen) * 40).to(f8).to(device)

    rows = lambda: bytes_(b, h, seq, d)  # noqa: E731
    q = argparse.Namespace(vals=rows())
    do = argparse.Namespace(vals=rows())
    k = argparse.Namespace(vals=rows(), off=argparse.Namespace(vals=rows()))
    qb = q.vals.to(torch.bfloat16)
    dob = (torch.randn(b, h, seq, d, generator=gen) * 1e-3).to(torch.bfloat16).to(device)
    vr, vbr = rows(), rows()
    stats = torch.empty(b * h, STATS_ROWS, seq)
    stats[:, 0] = 0.02  # s_q
    stats[:, 1] = 10.0  # M
    stats[:, 2] = 1e-2  # 1/l
    stats[:, 3] = torch.randn(b * h, seq, generator=gen) * 1e-3  # delta
    stats[:, 4] = 1e-4  # s_dO
    stats = stats.to(device)
    scale = lambda n: torch.full((b, h, n), 0.02, device=device)  # noqa: E731
    extra = dict(ks=scale(seq), kbs=scale(seq // G.TB), vs=scale(seq), vbs=scale(seq // G.TB), rd=scale(seq),
                 rb=scale(seq // G.TB))
    qt = q.vals.transpose(-1, -2).contiguous()
    dot = do.vals.transpose(-1, -2).contiguous()
    return q, do, k, qb, dob, vr, vbr, stats, extra, qt, dot


def launch(variant: str, ops, out):
    q, do, k, qb, dob, vr, vbr, stats, extra, qt, dot = ops
    b, h, seq, d = q.vals.shape
    fp8_dv, fp8_dk = VARIANTS[variant]
    descs = list(G.descriptors(q, k, do, qb, dob, vr, vbr, stats))
    args = (extra["ks"], extra["kbs"], extra["vs"], extra["vbs"], extra["rd"], extra["rb"], *out, 0.1, 0.088, seq, 1)
    if variant == "base":
        W._dkdv_ws_kernel[(seq // G.BN, b * h)](*descs, *args, **W.constexprs(True), num_warps=4, maxnreg=W.MAXNREG)
        return
    if fp8_dk:
        descs[2] = _cols_desc(qt, d, G.BM)
    if fp8_dv:
        descs[3] = _cols_desc(dot, d, G.BM)
    _probe_kernel[(seq // G.BN, b * h)](*descs, *args, D=d, BN=G.BN, BM=G.BM, TB=G.TB, STAGES=G.STAGES,
                                         STATS_ROWS=STATS_ROWS, PRODUCER_REGS=W.PRODUCER_REGS, FP8_DV=fp8_dv,
                                         FP8_DK=fp8_dk, num_warps=4, maxnreg=W.MAXNREG)


def compile_report(variant: str) -> dict:
    """ptxas's report for a variant compiled for sm_90 on this machine (no GPU needed)."""
    fp8_dv, fp8_dk = VARIANTS[variant]
    ops = operands(1, 1, 4 * G.TB, "cpu")
    q, do, k, qb, dob, vr, vbr, stats, extra, qt, dot = ops
    descs = list(G.descriptors(q, k, do, qb, dob, vr, vbr, stats))
    if fp8_dk:
        descs[2] = _cols_desc(qt, G.TB, G.BM)
    if fp8_dv:
        descs[3] = _cols_desc(dot, G.TB, G.BM)
    kinds = ["*fp32"] * 6 + ["*bf16", "*bf16", "fp32", "fp32", "i32", "i32"]
    consts = dict(D=G.TB, BN=G.BN, BM=G.BM, TB=G.TB, STAGES=G.STAGES, STATS_ROWS=STATS_ROWS,
                  PRODUCER_REGS=W.PRODUCER_REGS, FP8_DV=fp8_dv, FP8_DK=fp8_dk)
    ck = compile_gluon(_probe_kernel, descs, kinds, consts, {"num_warps": 4, "maxnreg": W.MAXNREG})
    return ptxas_report(ck.asm["ptx"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compile", action="store_true", help="compile each variant for sm_90 and print ptxas's report")
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=64, help="B × H (B = heads // 16, H = 16)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=5, help="timed calls per variant per round")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = ap.parse_args(argv)
    if args.compile:
        for v in args.variants:
            if v != "base":
                print(v, compile_report(v), flush=True)
        return 0
    b, h = args.heads // 16, 16
    ops = operands(b, h, args.seq, "cuda")
    out = (torch.empty(b, h, args.seq, G.TB, dtype=torch.bfloat16, device="cuda"),
           torch.empty(b, h, args.seq, G.TB, dtype=torch.bfloat16, device="cuda"))
    for v in args.variants:
        launch(v, ops, out)
    torch.cuda.synchronize()
    times = {v: [] for v in args.variants}
    for _ in range(args.rounds):
        for v in args.variants:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(args.calls):
                launch(v, ops, out)
            end.record()
            torch.cuda.synchronize()
            times[v].append(start.elapsed_time(end) / args.calls)
    base = statistics.median(times[args.variants[0]])
    print(f"S = {args.seq}, B×H = {args.heads}: dK/dV kernel ms per call (median of {args.rounds} rounds of "
          f"{args.calls} calls; rounds' range)")
    for v in args.variants:
        med = statistics.median(times[v])
        print(f"  {v:8s} {med:.3f} ({min(times[v]):.3f}–{max(times[v]):.3f})  {med / base:.3f}× {args.variants[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
