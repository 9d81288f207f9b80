"""dQ as a product of stored dS (launch option `ds_out`): the dK/dV kernel writes dS, this kernel multiplies it by K.

The two-kernel backward computes S, dP, P and dS twice for every (query, key) tile pair: once in the dK/dV kernel
(keys as rows) and again in the dQ kernel (queries as rows), three products of the seven and the elementwise work
between them. With `ds_out` the warp-specialized dK/dV kernel (`attention_dkdv_ws`, `DS_OUT`) stores each
sub-tile's dS·s_k in bf16 — the value the dQ kernel would form (`attention_bwd_gluon._dq_gluon_kernel`'s y) — into
a causal buffer (`attention_bwd_gluon.ds_buffer`: S² bytes a query head), and dQ = dS·K is then a plain product
over it: no exponentials, no statistics, one bf16 wgmma a key block, bound by reading the buffer once.

Layout: the buffer holds, for each query head and each block of QB = 128 queries qb, the 2(qb + 1) key blocks of
BN = 64 up to and including its diagonal token block, each a [BN, QB] tile with the keys as rows; the tiles of block
qb follow those of blocks 0..qb − 1. Off the diagonal the tiles were formed against K's token-block copy (s_kb), so
they multiply bf16(KB8) (`attention_bwd_copies`' KBBF); on the diagonal against the per-token bytes (s_k), KBF. The
dK/dV kernel writes a key block's tile only from its first key on: in the diagonal token block's second key block
the queries before it were never written, so they are masked here (they lie above the diagonal; every query the
kernel did write beyond its own position is an exact zero, P being 0 there).

dQ = sm_scale · Σ tiles, in fp32 (a bf16 product accumulates in fp32 on the tensor cores), as the dQ kernel sums
the same bf16 products in the same order (key blocks ascending, 16 keys a wgmma step): the GPU tests find dQ
bit-identical to the dQ kernel's (tests/test_attention_gpu.py, `test_gpu_ds_out_matches_the_dq_kernel`). On an H100
at S = 8k, B×H = 64 it reads the 4.4 GB buffer at 2.55 TB/s (1.66–1.71 ms; a copy of the buffer runs at 3.0 TB/s
read + write) where the dQ kernel took 2.2 ms (docs/benchmarks.md, session 25).

With spec part dsk=fp8 (the preset fp8 since session 31; launch options fp8_dq and ds_fp8 — session 26's code gave a
NaN dQ on its first run, fixed in the dK/dV kernel's stores by 76c5eff; on the H200 at 0c21fd0 this kernel takes
738 µs at 8k where the bf16 buffer's takes 1354, session 28) the buffer holds E4M3(dS·s_k/ρ)
under the queries' bound scales ρ (`reference.dq_row_scale`, powers of two known before the backward), half the bytes
each way, and dQ =
ρ · sm_scale · Σ tiles·K8 is one FP8 product a key block against K's bytes K-major (K8ᵀ and its token-block copy's):
`reference.backward_math(fp8_dq=True)`'s numerics, the Gluon dQ kernel's fp8_dq probe's. FP8 wgmma reads its A
operand K-major only, so the fp8 tiles are [QB queries, BN keys], transposed by the dK/dV kernel on its way into
shared memory (key pairs as 16-bit words, one stmatrix.trans a thread a sub-tile: the keys of each 16 in
`attention_bwd_gluon.DS_KEY_ORDER`, as K8ᵀ from the copies pass); transposed here, Triton moved each byte through
shared memory by itself (64 byte loads a thread a tile pair; scripts/kernel_registers.py --kernels dq_from_ds).
"""
from __future__ import annotations

import torch

from ._triton_env import HAS_TRITON, INTERPRET
from .attention_bwd_gluon import BN, TB
from .attention_bwd_gluon import DS_QB as QB
from .relaunch import Relaunch

if HAS_TRITON:
    import triton
    import triton.language as tl

    from .attention_quant import mma

# QB queries per program = per tile of the dS buffer; BN keys per tile (the dK/dV kernel's keys per program); TB the
# forward's token block, whose key blocks use K's per-token bytes: the buffer's layout, `attention_bwd_gluon`'s.
# Ring stages by the buffer's kind: on an H100 at S = 8k, B×H = 64 (session 32, scripts/device/dq_from_ds_probe.py,
# five rounds over two calls) the fp8 buffer's 0.887–0.909 ms at 5 stages against 0.945–0.981 at 3 (4: 0.892–0.918,
# 6: 0.893–0.913), the bf16 one's 1.640–1.644 at 4 against 1.670–1.675 at 3; the same bits. (Three stages were the
# bf16 buffer's pick of session 25, when an fp8 buffer did not exist.)
WARPS, STAGES = 8, {"fp8": 5, "bf16": 4}
# the buffer's tiles and K's blocks read by TMA (host tensor descriptors) instead of each thread's loads: a probe of
# whether the copy engine reads the buffer nearer the H200's 4.8 TB/s than the loads' ~3.2 (session 29: on an H100
# no faster, 1.744 ms at 8 warps × 4 stages against 1.753); the same sums
TMA = False
# two query blocks a program sharing each K tile (`_dq_from_ds_pairs_kernel`; sequence lengths a multiple of 2·QB): a
# probe of whether the L2 reads of K, as many bytes as the buffer's own, hold the kernel back (session 30, H100, 8k:
# 2.107 ms against 1.708 — two stages of a pair's tiles are all that fit — and K_ONCE below says K's reads cost 3%);
# the same bits. One program an SM (8 warps: 226-228 registers; 16 warps × 2 stages: 128);
# ptxas serializes its wgmma over either buffer (C7513 over bf16, C7515 over fp8; `scripts/kernel_registers.py --kernels
# dq_from_ds_pairs`, whose report missed C7513 until session 37)
PAIRS = False
# a probe, not a launch: each program multiplies every dS tile by its first K tile, read once, so that the kernel reads
# the buffer alone — how fast it then runs says whether K's L2 reads (as many bytes as the buffer's) hold it back
# (session 30, H100, 8k: 1.658 ms against 1.712, 3%: they do not). Wrong sums: never set outside
# scripts/device/dq_from_ds_probe.py
K_ONCE = False
# one loop over all of a program's key blocks: the diagonal token block's tiles loaded with their never-written
# queries masked to zero in the copy itself (cp.async's zero fill), instead of a second loop that zeroes them with
# `tl.where` — on sm_90 that loop's dS tiles went through registers and a scratch tile (LDS, STS, ldmatrix.trans, five
# CTA barriers a tile) and its pipeline started only once the first loop's had drained, a memory latency a program.
# The same products in the same order: the same bits (GPU: dq_from_ds_probe.py). The default since session 31: on an
# H100 at S = 8k (B×H = 64) 1.626 ms against the two loops' 1.660 over the bf16 buffer, 0.908 against 0.921 over the
# fp8 one (2 rounds each, dQ bit-identical in both; docs/benchmarks.md, session 31)
ONE_LOOP = True


if HAS_TRITON:

    @triton.jit
    def _ds_operand(Y, tile, offs_k, offs_q, QB: tl.constexpr, BN: tl.constexpr, FP8: tl.constexpr,
                    TMA: tl.constexpr):
        """Tile `tile` of the dS buffer as the product's A operand [QB queries, BN keys]: a bf16 tile is stored
        [BN keys, QB queries] (transposed here: 16-bit words, ldmatrix .trans), an fp8 one [QB, BN] (FP8 wgmma reads A
        K-major only, and a byte transposition here cost a byte load a byte). TMA: Y is a descriptor of the buffer's
        tiles stacked as rows ([tiles·BN, QB] bf16, [tiles·QB, BN] fp8)."""
        if TMA:
            if FP8:
                return Y.load([tile * QB, 0])
            else:
                return tl.trans(Y.load([tile * BN, 0]))
        elif FP8:
            return tl.load(Y + (tile.to(tl.int64) * QB + offs_q[:, None]) * BN + offs_k[None, :])
        else:
            return tl.trans(tl.load(Y + (tile.to(tl.int64) * BN + offs_k[:, None]) * QB + offs_q[None, :]))

    @triton.jit
    def _ds_operand_masked(Y, tile, offs_k, offs_q, lo, QB: tl.constexpr, BN: tl.constexpr, FP8: tl.constexpr):
        """`_ds_operand` (thread loads) with the queries before `lo` read as zeros (other=0: the copy's zero fill, the
        tile staying in shared memory for the product): the diagonal token block's never-written part. lo and each
        tile's first query are multiples of BN, so the mask is constant along 16-byte pieces of a row."""
        keep = offs_q >= lo
        if FP8:
            return tl.load(Y + (tile.to(tl.int64) * QB + offs_q[:, None]) * BN + offs_k[None, :], mask=keep[:, None],
                           other=0.0)
        else:
            return tl.trans(tl.load(Y + (tile.to(tl.int64) * BN + offs_k[:, None]) * QB + offs_q[None, :],
                                    mask=keep[None, :], other=0.0))

    @triton.jit
    def _k_tile(K, bhk, kb, offs_k, offs_d, S, D: tl.constexpr, BN: tl.constexpr, FP8: tl.constexpr,
                TMA: tl.constexpr):
        """Key block kb of K / V head bhk as the product's [BN keys, D] B operand: a bf16 copy's rows ([B·Hkv·S, D]),
        or FP8 the bytes K-major (K8ᵀ [B·Hkv·D, S]: the FP8 wgmma's B operand needs the keys contiguous). TMA: K is a
        descriptor of those 2-D views."""
        if TMA:
            if FP8:
                return tl.trans(K.load([bhk * D, kb * BN]))
            else:
                return K.load([bhk * S + kb * BN, 0])
        elif FP8:
            return tl.load(K + (bhk.to(tl.int64) * D + offs_d[None, :]) * S + kb * BN + offs_k[:, None])
        else:
            return tl.load(K + (bhk.to(tl.int64) * S + kb * BN + offs_k[:, None]) * D + offs_d[None, :])

    @triton.jit
    def _store_dq(acc, RHO, DQ, rows, offs_d, sm_scale, D: tl.constexpr, FP8: tl.constexpr):
        """dQ's rows `rows` (flat, [B·Hq·S]) in bf16: the fp32 sums × sm_scale, and × ρ per query where the tiles hold
        dS·s_k/ρ (an fp8 buffer)."""
        if FP8:
            acc = acc * (tl.load(RHO + rows) * sm_scale)[:, None]
        else:
            acc = acc * sm_scale
        tl.store(DQ + rows[:, None] * D + offs_d[None, :], acc.to(tl.bfloat16))

    @triton.jit
    def _dq_from_ds_kernel(Y, KBF, KBBF, RHO, DQ, sm_scale, S, G, BH0, D: tl.constexpr, QB: tl.constexpr,
                           BN: tl.constexpr, TB: tl.constexpr, FP8: tl.constexpr, INTERP: tl.constexpr,
                           TMA: tl.constexpr = False, K_ONCE: tl.constexpr = False, ONE_LOOP: tl.constexpr = False):
        qb = tl.num_programs(0) - 1 - tl.program_id(0)  # longest causal rows first
        bh = tl.program_id(1) + BH0  # the buffer holds query heads BH0.. (`dq_from_ds`' chunk)
        n_qb = S // QB
        tile0 = tl.program_id(1) * (n_qb * (n_qb + 1)) + qb * (qb + 1)
        first = qb * QB
        n_off = first // TB * TB // BN  # key blocks before the diagonal token block
        offs_k = tl.arange(0, BN)
        offs_q = tl.arange(0, QB)
        offs_d = tl.arange(0, D)
        bhk = bh // G
        acc = tl.zeros([QB, D], tl.float32)
        if ONE_LOOP:  # every key block in one pipelined loop (`ONE_LOOP`): the copy of K off the diagonal token block
            for kb in range(0, (first + QB) // BN):
                a = _ds_operand_masked(Y, tile0 + kb, offs_k, offs_q, kb * BN - first, QB, BN, FP8)
                kt = _k_tile(tl.where(kb < n_off, KBBF, KBF), bhk, kb, offs_k, offs_d, S, D, BN, FP8, False)
                acc = mma(a, kt, INTERP, acc)  # fp32 sums, in the two loops' order
            _store_dq(acc, RHO, DQ, bh.to(tl.int64) * S + first + offs_q, offs_d, sm_scale, D, FP8)
            return
        if K_ONCE:  # the probe's one K tile a program
            k_once = _k_tile(KBF, bhk, 0, offs_k, offs_d, S, D, BN, FP8, TMA)
        for kb in range(0, n_off):  # off the diagonal: against the token-block copy
            a = _ds_operand(Y, tile0 + kb, offs_k, offs_q, QB, BN, FP8, TMA)
            if K_ONCE:
                kt = k_once
            else:
                kt = _k_tile(KBBF, bhk, kb, offs_k, offs_d, S, D, BN, FP8, TMA)
            acc = mma(a, kt, INTERP, acc)  # fp32 sums
        for kb in range(n_off, (first + QB) // BN):  # the diagonal token block: per-token K
            a = _ds_operand(Y, tile0 + kb, offs_k, offs_q, QB, BN, FP8, TMA)
            # queries before the block were never written (zeros of the tile's type)
            a = tl.where((first + offs_q)[:, None] >= kb * BN, a, tl.zeros_like(a))
            kt = _k_tile(KBF, bhk, kb, offs_k, offs_d, S, D, BN, FP8, TMA)
            acc = mma(a, kt, INTERP, acc)  # fp32 sums
        _store_dq(acc, RHO, DQ, bh.to(tl.int64) * S + first + offs_q, offs_d, sm_scale, D, FP8)


    @triton.jit
    def _pair_operand(Y, tile_a, tile_b, kb, offs_k, offs_q2, QB: tl.constexpr, BN: tl.constexpr,
                      FP8: tl.constexpr):
        """`_ds_operand` of two query blocks at key block kb as one [2·QB queries, BN keys] A operand: rows 0..QB − 1
        from tile tile_a + kb, rows QB.. from tile_b + kb (the buffer's two tiles, one load)."""
        tile = (tl.where(offs_q2 < QB, tile_a, tile_b) + kb).to(tl.int64)
        q = offs_q2 % QB
        if FP8:
            return tl.load(Y + (tile[:, None] * QB + q[:, None]) * BN + offs_k[None, :])
        else:
            return tl.trans(tl.load(Y + (tile[None, :] * BN + offs_k[:, None]) * QB + q[None, :]))

    @triton.jit
    def _dq_from_ds_pairs_kernel(Y, KBF, KBBF, RHO, DQ, sm_scale, S, G, BH0, D: tl.constexpr, QB: tl.constexpr,
                                 BN: tl.constexpr, TB: tl.constexpr, FP8: tl.constexpr, INTERP: tl.constexpr):
        """`_dq_from_ds_kernel` for two query blocks a program (`PAIRS`), one [2·QB, D] accumulator: blocks 2p and
        2p + 1 share each key block they both multiply, so K's tiles cross from L2 once for both (half the kernel's
        L2 reads of K). Where the two blocks need different copies of K (block 2p's diagonal token block, off block
        2p + 1's diagonal) each copy multiplies its block's rows and zeros in the other's; past block 2p's keys
        block 2p's rows are zeros. Each row sums its products in the single kernel's order, plus exact zeros."""
        p = tl.num_programs(0) - 1 - tl.program_id(0)  # longest causal rows first
        bh = tl.program_id(1) + BH0
        n_qb = S // QB
        q0 = 2 * p  # the pair's first block; q0 + 1 its second
        tile_a = tl.program_id(1) * (n_qb * (n_qb + 1)) + q0 * (q0 + 1)
        tile_b = tile_a + 2 * (q0 + 1)  # block q0 + 1's tiles follow block q0's 2(q0 + 1)
        first = q0 * QB
        n_off = first // TB * TB // BN  # key blocks before block q0's diagonal token block
        n_a = (first + QB) // BN  # block q0's key blocks
        offs_k = tl.arange(0, BN)
        offs_q2 = tl.arange(0, 2 * QB)
        offs_d = tl.arange(0, D)
        bhk = bh // G
        in_a = (offs_q2 < QB)[:, None]
        acc = tl.zeros([2 * QB, D], tl.float32)
        for kb in range(0, n_off):  # off both blocks' diagonals: one token-block tile for both
            a = _pair_operand(Y, tile_a, tile_b, kb, offs_k, offs_q2, QB, BN, FP8)
            acc = mma(a, _k_tile(KBBF, bhk, kb, offs_k, offs_d, S, D, BN, FP8, False), INTERP, acc)
        for kb in range(n_off, n_a):  # block q0's diagonal token block: per-token K for its rows, the copy for q0 + 1's
            a = _pair_operand(Y, tile_a, tile_b, kb, offs_k, offs_q2, QB, BN, FP8)
            zero = tl.zeros_like(a)
            a = tl.where((first + offs_q2)[:, None] >= kb * BN, a, zero)
            acc = mma(tl.where(in_a, a, zero), _k_tile(KBF, bhk, kb, offs_k, offs_d, S, D, BN, FP8, False), INTERP, acc)
            acc = mma(tl.where(in_a, zero, a), _k_tile(KBBF, bhk, kb, offs_k, offs_d, S, D, BN, FP8, False), INTERP,
                      acc)
        for kb in range(n_a, (first + 2 * QB) // BN):  # block q0 + 1's diagonal token block (block q0's rows: zeros)
            a = _pair_operand(Y, tile_a, tile_b, kb, offs_k, offs_q2, QB, BN, FP8)
            a = tl.where(((first + offs_q2)[:, None] >= kb * BN) & ~in_a, a, tl.zeros_like(a))
            acc = mma(a, _k_tile(KBF, bhk, kb, offs_k, offs_d, S, D, BN, FP8, False), INTERP, acc)
        _store_dq(acc, RHO, DQ, bh.to(tl.int64) * S + first + offs_q2, offs_d, sm_scale, D, FP8)


_LAUNCH = Relaunch(_dq_from_ds_kernel) if HAS_TRITON else None
_PAIRS_LAUNCH = Relaunch(_dq_from_ds_pairs_kernel) if HAS_TRITON else None


def _tma_views(ds: torch.Tensor, kbf: torch.Tensor, kbbf: torch.Tensor, fp8: bool, d: int):
    """Host TMA descriptors (`TMA`) of the buffer's tiles stacked as rows and of K's two 2-D views, each box one
    tile: [BN, QB] bf16 / [QB, BN] fp8 tiles, [BN, D] rows of K's bf16 copies or [D, BN] of K8ᵀ ([B·Hkv·D, S])."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    if fp8:
        y = TensorDescriptor.from_tensor(ds.view(-1, BN), [QB, BN])
        views = [TensorDescriptor.from_tensor(t.view(-1, t.shape[-1]), [d, BN]) for t in (kbf, kbbf)]
    else:
        y = TensorDescriptor.from_tensor(ds.view(-1, QB), [BN, QB])
        views = [TensorDescriptor.from_tensor(t.view(-1, d), [BN, d]) for t in (kbf, kbbf)]
    return (y, *views)


def dq_from_ds(ds: torch.Tensor, kbf: torch.Tensor, kbbf: torch.Tensor, b: int, hq: int, seq: int,
               sm_scale: float, heads: range | None = None, out: torch.Tensor | None = None,
               rho: torch.Tensor | None = None) -> torch.Tensor:
    """dQ [B, Hq, S, D] bf16 from the dS buffer (`attention_bwd_gluon.ds_buffer`, filled by the dK/dV kernel's
    `ds_out`) and K's bf16 copies KBF (per-token) and KBBF (token-block), [B, Hkv, S, D]. heads: the flat query
    heads (b·Hq + h) the buffer holds, in order (all by default); out: the dQ tensor to write their rows into.
    An fp8 buffer (dsk=fp8 with ds_out: E4M3(dS·s_k/ρ)) multiplies K's bytes K-major instead, KBF =
    K8ᵀ and KBBF = its token-block copy's, [B, Hkv, D, S], and needs ρ [B, Hq, S] (`reference.dq_row_scale`)."""
    fp8 = ds.dtype == torch.float8_e4m3fn
    d = kbf.shape[-2] if fp8 else kbf.shape[-1]
    if seq % QB:
        raise ValueError(f"dq_from_ds: sequence length {seq} is not a multiple of {QB}")
    if fp8 != (rho is not None):
        raise ValueError(f"dq_from_ds: an fp8 dS buffer needs its queries' scales rho, a bf16 one none (the buffer is "
                         f"{ds.dtype}, rho {'given' if rho is not None else 'None'})")
    if fp8 and kbf.dtype != torch.float8_e4m3fn:
        raise ValueError(f"dq_from_ds: an fp8 dS buffer multiplies K's fp8 bytes K-major [B, Hkv, D, S], got "
                         f"{kbf.dtype}")
    heads = range(b * hq) if heads is None else heads
    if out is None:
        out = torch.empty(b, hq, seq, d, dtype=torch.bfloat16, device=ds.device)
    if PAIRS and not TMA and seq % (2 * QB) == 0:  # two query blocks a program (the thread loads only)
        launch, rows, kernel_options = _PAIRS_LAUNCH, 2 * QB, {}
    else:
        # K_ONCE (a probe of the two loops' off-diagonal one) and TMA run the two loops: ONE_LOOP gives way to them
        launch, rows, kernel_options = _LAUNCH, QB, {"TMA": TMA, "K_ONCE": K_ONCE,
                                                     "ONE_LOOP": ONE_LOOP and not (TMA or K_ONCE)}
    y, kf, kbf_ = _tma_views(ds, kbf, kbbf, fp8, d) if TMA else (ds, kbf, kbbf)
    launch((seq // rows, len(heads)),
           (y, kf, kbf_, rho if fp8 else out, out, sm_scale, seq, hq // kbf.shape[1], heads.start),
           dict(D=d, QB=QB, BN=BN, TB=TB, FP8=fp8, INTERP=INTERPRET, **kernel_options),
           dict(num_warps=WARPS, num_stages=STAGES["fp8" if fp8 else "bf16"]))
    return out
