"""FLAMIA dK/dV kernel for sm_90, warp-specialized: `attention_bwd_gluon`'s dK/dV with a TMA producer warp.

The Gluon dK/dV kernel spends a 32-query sub-tile's 434 sm_90 instructions (its off-diagonal loop, per thread) on
16 score and 16 dP elements per thread, four products, and a fixed share: the TMA issue of the sub-tile's five copies
(~130 instructions of descriptor arithmetic, `ELECT`, `UTMALDG`, and the CTA barriers Triton's membar pass puts
around them), the statistics' shared loads, the waits. Session 10 measured that this fixed work, not the products,
sets the backward's pace (docs/kernels.md, open item 1). Here a producer warp (24 registers by `setmaxnreg`) issues
every TMA copy into a ring of stages, each stage released by the consumer through an mbarrier once the products
reading it have retired, and the consumer warpgroup (232 registers, two programs per SM as before) only waits,
multiplies and issues products:

- the producer loads K's and V's per-token rows, then each sub-tile's Q8, dO8, QB, dO8ᵀ and statistics (the
  diagonal's first); once the consumer has retired every product on the per-token rows (`kv_free`), the token-block
  copies into the same shared memory before the off-diagonal sub-tiles;
- the consumer runs `attention_bwd_gluon._dkdv_gluon_kernel`'s arithmetic, operation for operation (the same
  products, shapes and elementwise expressions, the off-diagonal loop's Sᵀ and dPᵀ of sub-tile j + 1 in flight over
  the elementwise work of j), so dK and dV are the same bits (a GPU test compares them).

Launch option "ws_dkdv" of `attention_bwd.backward` (scripts' `:wsdkdv`), the fp8 fast path's default since
session 15: the kernel 3848 / 4097 µs against the fused one's 4262 / 4355 at S = 8k, B×H = 64 (torch.profiler, two
rounds), fwd + bwd 0.79 -> 0.85× cuDNN at 8k and 0.82 -> 0.88× at 16k in one run (`session15_wsdkdv.sh`, fa1d110),
with bf16 dV; its dV product FP8 since session 16 (`attention_bwd_gluon`'s docstring).
With DS_OUT (launch option ds_out, the fast path's default since session 25) the consumer also stores each
sub-tile's dS·s_k in bf16 — the dQ kernel's A operand — through two shared tiles and a TMA store into the dS buffer
(`attention_bwd_gluon.ds_buffer`), one barrier a sub-tile, for `dq_from_ds`; launches may cover a range of K / V
heads (BH0..) so that the buffer holds one chunk of heads at a time. +8 to +10% on this kernel (3.45 → 3.73–3.81 ms at
S = 8k, B×H = 64 on an H100), against the dQ kernel's 2.2 ms it replaces with 1.66–1.71. With spec part dsk=fp8
(launch options fp8_dq and ds_fp8) the buffer is fp8 (E4M3(dS·s_k/ρ), half the bytes; `attention_bwd_gluon._store_ds`):
at a6725e6 it ran 3740 → 4311 µs at 8k on an H100 and its dQ came out NaN (session 27); with each key pair's bytes
packed by one cvt (76c5eff) it is right and costs what the bf16 stores cost, 3746 against 3751 µs on the H200
(session 28).
With FOLD_K (launch option fold_k, the default where DS_OUT runs over a bf16 buffer) the consumer also makes K's
backward copies: at the program's start it writes K's per-token rows as bf16 (KBF, `dq_from_ds`' operand); once the
diagonal's products on them have retired it re-quantizes them in place into K's token-block copy under the block
scales the forward saved and writes the copy's rows as bf16 (KBBF), where the producer loaded that copy and the
copies pass wrote all three (`_fold_k_copy`): −142 µs of pass for ~+35 µs here, ~−110 µs of kernels a call at S = 8k
on an H100, the same bits (session 30). Over the fp8 buffer (K_T, `attention_bwd.FOLD_K_T`) it writes K's E4M3
bytes K-major in that buffer's key order instead (`_store_k_bytes_t`), transposed in the shared-memory read and stored
as 16-byte vectors: the same bits; byte by byte down D (session 31) this kernel took 4070 µs against 3823 for the 142
µs of pass it saves, as vectors (session 32, H100, 8k) +75 µs here for −140 of pass.
With FOLD_V as well (`attention_bwd.FOLD_V`, over the fp8 buffer; V's block scales saved by the forward too) the
producer brings Vᵀ's per-token bytes instead of V's rows, the consumer transposes them into V's rows in place
(`_v_rows`) before the first product and, once the diagonal's products have retired, re-quantizes them into V's
token-block copy (`_fold_v_copy`), where the producer loaded the copies pass's VBR: no key copies pass runs (session 32,
H100, 8k: +22 µs here for the 92 µs of V's half over the fp8 buffer, +118 µs over the bf16 one).
Scope: `attention_bwd_gluon.eligible`'s. Gluon has no interpreter: on the CPU this compiles for sm_90 only
(tests/test_kernel_registers.py).
"""
from __future__ import annotations

import torch

from . import attention_bwd_gluon as fused
from ._triton_env import HAS_GLUON
from .attention_bwd_copies import STATS_ROWS
from .attention_operands import deferred_with_scales
from .relaunch import Relaunch

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
    )

    from .attention_bwd_gluon import (
        _DS_QB,
        _diag_sub_tile,
        _dkdv_smem,
        _ds_place,
        _issue_sub_tile,
        _off_diagonal,
        _release,
        _row_scales,
        _store_dkdv,
    )
    from .attention_fwd_gluon import _store_e4m3

BN, BM, TB = fused.BN, fused.BM, fused.TB
# ring stages: four since the dV product is FP8 (a stage 20.6 KB: Q8, dO8, dO8ᵀ, QB, statistics; two programs per SM
# in 2 × 98.5 KB): 3460-3539 µs against three stages' 3665-3725 at S = 8k, B×H = 64 (session16_stages.sh)
STAGES = 4
PRODUCER_REGS = 24  # the minimum: the producer holds scalars only
# two programs per SM share 65,536 registers: 8 warps (the producer's warp rounds up to a warpgroup) at 128 each, of
# which the consumer warpgroup gets what the producer leaves, 2 × 128 − 24 = 232 a thread
MAXNREG = 128


if HAS_GLUON:

    @gluon.jit
    def _produce(c, bh, lo, descs, smems, ready, empty, S, STAGES: gl.constexpr, BM: gl.constexpr,
                 STATS_ROWS: gl.constexpr, FP8_DK: gl.constexpr):
        """Sub-tile c of the program (query rows lo.. of head bh) into stage c % STAGES (`_issue_sub_tile`) once the
        consumer has released that stage's previous sub-tile (a fresh mbarrier counts the phase before its first as
        complete, hence parity 1 on the first round)."""
        mbarrier.wait(empty.index(c % STAGES), ((c // STAGES) & 1) ^ 1)
        _issue_sub_tile(0, c, bh, lo, descs, smems, ready, STAGES, BM, S, STATS_ROWS, FP8_DK)

    @gluon.jit
    def _producer(descs, kv_descs, smems, k_s, v_s, ready, empty, kv_ready, kv_free, S, G, BH0,
                  BN: gl.constexpr, BM: gl.constexpr, TB: gl.constexpr, STAGES: gl.constexpr,
                  STATS_ROWS: gl.constexpr, FP8_DK: gl.constexpr, FOLD_K: gl.constexpr, FOLD_V: gl.constexpr):
        """Every TMA copy of the program, in the consumer's order (`_consumer`)."""
        k_desc, kb_desc, vr_desc, vbr_desc, vt_desc = kv_descs
        first = gl.program_id(0) * BN
        bhk = gl.program_id(1) + BH0
        t = first // TB
        if FOLD_V:  # Vᵀ's per-token columns into v_s's bytes, which the consumer transposes in place (`_v_rows`)
            D: gl.constexpr = vt_desc.block_type.shape[0]
            mbarrier.expect(kv_ready, k_desc.block_type.nbytes + vt_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [bhk * S + first, 0], kv_ready, k_s)
            tma.async_copy_global_to_shared(vt_desc, [bhk * D, first], kv_ready,
                                            v_s._reinterpret(vt_desc.dtype, [D, BN], vt_desc.layout))
        else:
            mbarrier.expect(kv_ready, k_desc.block_type.nbytes + vr_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [bhk * S + first, 0], kv_ready, k_s)
            tma.async_copy_global_to_shared(vr_desc, [bhk * S + first, 0], kv_ready, v_s)
        c = 0
        n_diag = ((t + 1) * TB - first) // BM
        for g in range(G):
            bh = bhk * G + g
            for j in range(n_diag):
                _produce(c, bh, first + j * BM, descs, smems, ready, empty, S, STAGES, BM, STATS_ROWS, FP8_DK)
                c += 1
        # the token-block copies replace the per-token rows once no product reads those (FOLD_K: K's copy is
        # re-quantized in place by the consumer, `_fold_k_copy`; FOLD_V, which comes with FOLD_K, V's too)
        if not FOLD_V:
            mbarrier.wait(kv_free, 0)
            if FOLD_K:
                mbarrier.expect(kv_ready, vbr_desc.block_type.nbytes)
            else:
                mbarrier.expect(kv_ready, kb_desc.block_type.nbytes + vbr_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(kb_desc, [bhk * S + first, 0], kv_ready, k_s)
            tma.async_copy_global_to_shared(vbr_desc, [bhk * S + first, 0], kv_ready, v_s)
        lo0 = (t + 1) * TB
        for g in range(G):
            bh = bhk * G + g
            for j in range((S - lo0) // BM):
                _produce(c, bh, lo0 + j * BM, descs, smems, ready, empty, S, STAGES, BM, STATS_ROWS, FP8_DK)
                c += 1

    @gluon.jit
    def _store_k_rows_bf16(k_s, X, bhk, S, first, L: gl.constexpr):
        """FOLD_K: the E4M3 rows in k_s as bf16 (exact) to X [B·Hkv·S, D] at the program's keys: the dQ product's B
        operand (`attention_bwd_copies`' KBF from K's per-token bytes, KBBF from its token-block copy's)."""
        BN: gl.constexpr = k_s.shape[0]
        D: gl.constexpr = k_s.shape[1]
        offs_r = first + gl.arange(0, BN, layout=gl.SliceLayout(1, L))
        offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, L))
        rows = (bhk.to(gl.int64) * S + offs_r.to(gl.int64))[:, None] * D + offs_d[None, :]
        gl.store(X + rows, k_s.load(L).to(gl.bfloat16))

    @gluon.jit
    def _store_k_bytes_t(k_s, XT, bhk, S, first, L: gl.constexpr):
        """FOLD_K with K_T (the FP8 dQ product): the E4M3 rows in k_s to XT [B·Hkv, D, S] K-major, the keys of each 16
        in the fp8 dS buffer's order (`attention_bwd_gluon.DS_KEY_ORDER`: key 16w + 8h + g at place 16w + 2g + h), as
        `attention_bwd_copies._store_bytes_transposed` writes copies' KBF / KBBF. The transposition happens in the
        shared-memory read: k_s seen as [BN / 16 groups, 16 keys, D], each thread holds keys g and g + 8 (g = 0..7) of
        one group for 4 consecutive d (ptxas reads them by ldmatrix, two a copy), packs each pair into a 16-bit word
        (key g's byte low: little-endian, so the word holds places 2g and 2g + 1; the byte shuffles are ~200 PRMT a
        copy, once a program) and stores a d's 8 words as one 16-byte vector. Written byte by byte down D (one store a
        byte, 128 bytes of their addresses spilled) this took the H100 247 µs of kernel at S = 8k for the 142 µs of pass
        it saved (session 31); so, ~+70 µs (session 32). L: unused (`_store_k_copy`'s signature; the warps are the
        partition's)."""
        BN: gl.constexpr = k_s.shape[0]
        D: gl.constexpr = k_s.shape[1]
        NW: gl.constexpr = gl.num_warps()
        gl.static_assert(BN // 16 == NW, "one warp per group of 16 keys")
        G3: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 8, 4], threads_per_warp=[1, 1, 32],
                                            warps_per_cta=[NW, 1, 1], order=[1, 2, 0])
        groups = k_s.reshape([BN // 16, 16, D])
        lo = groups.slice(0, 8, dim=1).load(G3).to(gl.uint8, bitcast=True).to(gl.int16)
        hi = groups.slice(8, 8, dim=1).load(G3).to(gl.uint8, bitcast=True).to(gl.int16)
        words = lo | (hi << 8)
        w = gl.arange(0, BN // 16, layout=gl.SliceLayout(1, gl.SliceLayout(2, G3)))
        g = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(2, G3)))
        d = gl.arange(0, D, layout=gl.SliceLayout(0, gl.SliceLayout(1, G3)))
        # 64-bit once; within a head D·S bytes fit 32 bits
        head = XT.to(gl.pointer_type(gl.int16), bitcast=True) + bhk.to(gl.int64) * D * (S // 2) + first // 2
        pairs = (w * 8)[:, None] + g[None, :]
        gl.store(head + pairs[:, :, None] + (d * (S // 2))[None, None, :], words)

    @gluon.jit
    def _store_k_copy(k_s, X, bhk, S, first, L: gl.constexpr, K_T: gl.constexpr):
        """K's rows in k_s for `dq_from_ds`: bf16 rows (`_store_k_rows_bf16`) or, with K_T, E4M3 bytes K-major
        (`_store_k_bytes_t`)."""
        if K_T:
            _store_k_bytes_t(k_s, X, bhk, S, first, L)
        else:
            _store_k_rows_bf16(k_s, X, bhk, S, first, L)

    @gluon.jit
    def _fold_k_copy(k_s, ks, KBBF, kbs, bhk, S, first, L: gl.constexpr, K_T: gl.constexpr):
        """FOLD_K, once every product on K's per-token rows has retired (their copy KBF written at the program's start):
        those rows re-quantized in place into K's token-block copy under kbs (`_requant_rows`: as
        `attention_bwd_copies._key_copies_kernel`'s K_REQ writes KB from the same bytes), and that copy to KBBF
        (`_store_k_copy`: bf16 rows, or with K_T E4M3 bytes K-major). The barrier orders every warp's bytes before the
        next products read k_s. ks: the rows' scales as the program loaded them (a layout conversion here, not a
        second read of global memory at this point, where the program waits for it)."""
        _requant_rows(k_s, ks, kbs, L)
        _store_k_copy(k_s, KBBF, bhk, S, first, L, K_T)
        fence_async_shared()  # the generic-proxy stores, seen by the products (async proxy)
        gl.thread_barrier()

    @gluon.jit
    def _requant_rows(x_s, xs, bscale, L: gl.constexpr):
        """The E4M3 rows in x_s (per-token scales xs) re-quantized in place under the block scale bscale, as the
        copies pass re-quantizes a deferred token-block copy (`attention_bwd_copies._key_copies_kernel`, K_REQ and
        V_REQ): x = E4M3 value · s per element, x / bscale by `quantize._div_by_shared`'s division (one IEEE
        reciprocal, Markstein's correction), the hardware's E4M3 bytes with the NaN fix where bscale is not finite
        (`_store_e4m3`). bscale: the block's scale the forward computed and saved (`attention.py`), from the amax of
        those same values. Each thread re-reads the places it wrote; the caller fences and synchronizes."""
        x = x_s.load(L).to(gl.float32) * gl.convert_layout(xs, gl.SliceLayout(1, L))[:, None]
        rcp = gl.div_rn(1.0, bscale)
        rem_scale = gl.where(rcp == 0.0, 0.0, bscale)  # x / Inf = ±0 (see `quantize._div_by_shared`)
        q0 = x * rcp
        one = gl.full(x.shape, 1.0, gl.float32, L)  # the scalars as tiles (fma does not broadcast), exactly
        rem = gl.fma(q0, one * rem_scale, x * -1.0)  # negated: keeps -0
        v = gl.fma(rem, one * (rcp * -1.0), q0)  # -rcp by a product: -0 where rcp = +0 (0 - rcp would give +0)
        _store_e4m3(x_s, v, bscale < float("inf"))  # a NaN or infinite scale: some quotient may be NaN

    @gluon.jit
    def _v_rows(v_s, vt_desc):
        """FOLD_V, at the program's start: v_s holds Vᵀ's per-token bytes [D, BN] (keys contiguous, as the TMA
        brought them: vt_desc's layout); they become V's rows [BN, D] in place, the dPᵀ product's A operand
        (the copies pass's VR: the same bytes). Each thread reads 4 d × 16 keys (four 16-byte reads), every warp reads
        before any writes, and its 16 keys' 4 d go back through byte shuffles and stmatrix (sm_90 SASS: 4 LDS.128,
        ~50 PRMT, 4 STSM a thread): +22 µs of kernel at S = 8k on an H100 with the re-quantization below."""
        BN: gl.constexpr = v_s.shape[0]
        D: gl.constexpr = v_s.shape[1]
        NW: gl.constexpr = gl.num_warps()
        T_L: gl.constexpr = gl.BlockedLayout(size_per_thread=[4, 16], threads_per_warp=[32, 1], warps_per_cta=[1, NW],
                                             order=[1, 0])
        vt = v_s._reinterpret(v_s.dtype, [D, BN], vt_desc.layout).load(T_L)
        gl.thread_barrier()  # every warp's bytes are in registers before any warp overwrites them
        v_s.store(gl.permute(vt, (1, 0)))
        fence_async_shared()  # the generic-proxy stores, seen by the products (async proxy)
        gl.thread_barrier()

    @gluon.jit
    def _fold_v_copy(v_s, vs, vbs, L: gl.constexpr):
        """FOLD_V, once every product on V's per-token rows has retired: those rows re-quantized in place into V's
        token-block copy (`_requant_rows`), the copies pass's VBR, under the block scale the forward saved."""
        _requant_rows(v_s, vs, vbs, L)
        fence_async_shared()
        gl.thread_barrier()

    @gluon.jit
    def _ds_base(y_s, y_desc, g, G, S):
        """`_ds_place`'s base for query head g of this program's K / V head: the buffer holds this launch's query heads
        only, n_qb(n_qb + 1) tiles each, and the program's key block picks its tile in each query block's row."""
        n_qb = S // _DS_QB
        return y_s, y_desc, (gl.program_id(1) * G + g) * (n_qb * (n_qb + 1)) + gl.program_id(0)

    @gluon.jit
    def _consumer(smems, k_s, v_s, ready, empty, kv_ready, kv_free, KS, KBS, VS, VBS, TAU, SIG, DK, DV, KBF, KBBF,
                  qk_scale, sm_scale, S, G, BH0, y_s, y_desc, vt_desc, D: gl.constexpr, BN: gl.constexpr,
                  BM: gl.constexpr, TB: gl.constexpr, STAGES: gl.constexpr, FP8_DK: gl.constexpr, DS_OUT: gl.constexpr,
                  FOLD_K: gl.constexpr, K_T: gl.constexpr, FOLD_V: gl.constexpr):
        """`attention_bwd_gluon._dkdv_gluon_kernel`'s products and elementwise work, each sub-tile's operands waited
        for in its ring stage and the stage released once the products reading it have retired."""
        NW: gl.constexpr = BN // 16  # a warpgroup per 64 keys
        S_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, BM, 32])
        O_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, D, 16])
        O8_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, D, 32])
        A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_L, k_width=2)  # bf16 A from registers
        A8_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O8_L, k_width=4)  # fp8 A from registers
        KEY: gl.constexpr = gl.SliceLayout(1, S_L)
        QRY: gl.constexpr = gl.SliceLayout(0, S_L)

        first = gl.program_id(0) * BN
        bhk = gl.program_id(1) + BH0  # the launch covers K / V heads BH0.. (`dkdv`'s chunks)
        t = first // TB
        rb = bhk.to(gl.int64) * (S // TB) + t
        offs_n = first + gl.arange(0, BN, layout=KEY)
        kv_offs = bhk.to(gl.int64) * S + offs_n
        ks = gl.load(KS + kv_offs)
        vs = gl.load(VS + kv_offs)
        itau = _row_scales(TAU, bhk, S, offs_n)
        if FP8_DK:  # dK an FP8 product too (launch option fp8_dk): 1/ρ per key, the accumulator of an FP8 wgmma
            isig = _row_scales(SIG, bhk, S, offs_n)
            dk = gl.zeros([BN, D], gl.float32, O8_L)
        else:
            isig = itau  # unread
            dk = gl.zeros([BN, D], gl.float32, O_L)
        dv = gl.zeros([BN, D], gl.float32, O8_L)
        zero = gl.zeros([BN, BM], gl.float32, S_L)
        # FOLD_K's [BN, D] K rows: 16 consecutive bytes of a row a thread (one 16-byte vector of the swizzled shared
        # tile, two of a bf16 row in global memory)
        K_L: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 16], threads_per_warp=[4, 8], warps_per_cta=[NW, 1],
                                             order=[1, 0])
        if FOLD_K:  # read now, not where the copy is made: one scalar held over the diagonal's sub-tiles
            kbs = gl.load(KBS + rb)
        if FOLD_V:  # read now, not where the copy is made
            vbs = gl.load(VBS + rb)
        mbarrier.wait(kv_ready, 0)
        if FOLD_V:  # V's rows from Vᵀ's bytes before the first product reads them
            _v_rows(v_s, vt_desc)
        if FOLD_K:  # K's per-token rows for `dq_from_ds` now, while the first sub-tile's copies are in flight
            _store_k_copy(k_s, KBF, bhk, S, first, K_L, K_T)
        c = 0
        n_diag = ((t + 1) * TB - first) // BM
        for g in range(G):  # the query heads sharing this K / V head, in the producer's order
            ybase = _ds_base(y_s, y_desc, g, G, S)
            for j in range(n_diag):
                stage = c % STAGES
                offs_m = first + j * BM + gl.arange(0, BM, layout=QRY)
                mbarrier.wait(ready.index(stage), (c // STAGES) & 1)
                dv, dk = _diag_sub_tile(k_s, v_s, smems, stage, ks, vs, itau, isig, offs_n, offs_m, dv, dk, zero,
                                        qk_scale, QRY, A_L, A8_L, FP8_DK,
                                        _ds_place(ybase, first + j * BM, smems[4].index(stage), DS_OUT), c,
                                        DS_OUT)
                _release(empty, stage)
                c += 1
        mbarrier.arrive(kv_free, count=1)  # every product on the per-token rows has retired

        # off the diagonal: the token-block copies
        if FOLD_K:  # K's copy from its per-token rows, while the producer's TMA brings V's
            _fold_k_copy(k_s, ks, KBBF, kbs, bhk, S, first, K_L, K_T)
        else:
            kbs = gl.load(KBS + rb)
        if FOLD_V:  # and V's
            _fold_v_copy(v_s, vs, vbs, K_L)
        else:
            vbs = gl.load(VBS + rb)
            mbarrier.wait(kv_ready, 1)
        n_off = (S - (t + 1) * TB) // BM
        for g in range(G):
            ybase = _ds_base(y_s, y_desc, g, G, S)
            if n_off > 0:  # the producer's descriptors are not the consumer's: `_done_with` hands stages back only
                dv, dk = _off_diagonal(c, n_off, k_s, v_s, smems, ready, empty, kbs, vbs, itau, isig, dv, dk, zero,
                                       qk_scale, 0, 0, smems, S, QRY, A_L, A8_L, STAGES, BM, 0, True, FP8_DK, ybase,
                                       (t + 1) * TB, DS_OUT)
                c += n_off
        if DS_OUT:
            tma.store_wait(0)  # the dS tiles' stores have read their shared memory before the program ends
        _store_dkdv(dv, dk, DK, DV, TAU, SIG, bhk, S, first, sm_scale, BN, D, FP8_DK)

    @gluon.jit
    def _dkdv_ws_kernel(q_desc, do_desc, qb_desc, dot_desc, k_desc, kb_desc, vr_desc, vbr_desc, st_desc, KS, KBS, VS,
                        VBS, TAU, SIG, DK, DV, KBF, KBBF, qk_scale, sm_scale, S, G, y_desc, BH0, vt_desc,
                        D: gl.constexpr,
                        BN: gl.constexpr,
                        BM: gl.constexpr, TB: gl.constexpr, STAGES: gl.constexpr, STATS_ROWS: gl.constexpr,
                        PRODUCER_REGS: gl.constexpr, FP8_DK: gl.constexpr = False, DS_OUT: gl.constexpr = False,
                        FOLD_K: gl.constexpr = False, K_T: gl.constexpr = False, FOLD_V: gl.constexpr = False):
        gl.static_assert(FOLD_K or not FOLD_V, "FOLD_V comes with FOLD_K: the producer then loads no token-block copy")
        k_s, v_s, smems = _dkdv_smem((q_desc, do_desc, qb_desc, dot_desc, st_desc), k_desc, vr_desc, D, BM, STAGES,
                                     STATS_ROWS)
        if DS_OUT:  # two tiles of dS·s_k on their way to the dS buffer (`_store_ds`)
            y_s = gl.allocate_shared_memory(y_desc.dtype, [2] + y_desc.block_type.shape, y_desc.layout)
        else:
            y_s = k_s  # unread
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        kv_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=1)
        mbarrier.init(kv_ready, count=1)
        mbarrier.init(kv_free, count=1)
        # the argument tuples written out in place: a tuple bound to a name turns its constexprs into tensors
        gl.warp_specialize([
            (_consumer, (smems, k_s, v_s, ready, empty, kv_ready, kv_free, KS, KBS, VS, VBS, TAU, SIG, DK, DV,
                         KBF, KBBF, qk_scale, sm_scale, S, G, BH0, y_s, y_desc, vt_desc, D, BN, BM, TB, STAGES, FP8_DK,
                         DS_OUT, FOLD_K, K_T, FOLD_V)),
            (_producer, ((q_desc, do_desc, qb_desc, dot_desc, st_desc),
                         (k_desc, kb_desc, vr_desc, vbr_desc, vt_desc), smems, k_s, v_s, ready, empty, kv_ready,
                         kv_free, S, G, BH0, BN, BM, TB, STAGES, STATS_ROWS, FP8_DK, FOLD_K, FOLD_V))],
            [1], [PRODUCER_REGS])


# launched through `relaunch.Relaunch`: Triton's launch path once per plan, the compiled launcher after that
_LAUNCH = Relaunch(_dkdv_ws_kernel) if HAS_GLUON else None


def constexprs() -> dict:
    return dict(D=TB, BN=BN, BM=BM, TB=TB, STAGES=STAGES, STATS_ROWS=STATS_ROWS, PRODUCER_REGS=PRODUCER_REGS)


@torch.compiler.disable  # as attention_bwd_gluon.dkdv: a Gluon launch, not traced
def dkdv(q, k, v, do, copies, stats, tau, sm_scale: float, fp8_dk=None, ds_out=None, heads=None, out=None,
         fold_k: bool = False, fold_v: bool = False):
    """`attention_bwd_gluon.dkdv` (same arguments and outputs) on the warp-specialized kernel. fp8_dk (launch option
    fp8_dk, a probe): (Q8ᵀ [B, Hq, D, S], ρ [B, Hkv, S]) to run the dK product in FP8 under the keys' bound scales
    (`reference.dk_row_scale`) against Q's bytes K-major, in place of copies' QB. ds_out (launch option ds_out): the
    dS buffer (`attention_bwd_gluon.ds_buffer`) of the query heads of `heads`, filled for `dq_from_ds`; heads: the
    flat K / V heads (b·Hkv + h) range this launch covers (all by default), out: (dK, dV) to write them into.
    fold_k (launch option fold_k): K's token-block copy is deferred with its block scales known (k.off.scale, saved
    by the forward), and this kernel derives it from K's per-token rows in shared memory and writes copies' KBF and
    KBBF itself (`_fold_k_copy`), which the copies pass then skips (`bf16_copies(fold_k=True)`). fold_v (with fold_k,
    `attention_bwd.FOLD_V`): V's copy likewise deferred with its block scales known (v.off.scale), and this kernel
    reads Vᵀ's per-token bytes (v.vals_t), makes V's rows from them (`_v_rows`) and re-quantizes them into the
    token-block copy (`_fold_v_copy`), so that the copies pass skips V's half too (copies' VR and VBR: None)."""
    b, hq, seq, d = q.vals.shape
    hkv = k.vals.shape[1]
    qb, dot, kbf, kbbf, vr, vbr = copies
    k_t = kbf.dtype == torch.float8_e4m3fn  # the FP8 dQ product's operand: K's bytes K-major
    if fold_k and (not deferred_with_scales(k) or kbf.dtype not in (torch.bfloat16, torch.float8_e4m3fn)
                   or kbf.shape[-2:] != ((d, seq) if k_t else (seq, d))):
        raise ValueError("dkdv(fold_k=True): K's token-block copy must be deferred with its block scales given "
                         "(k.off.scale) and copies' KBF, KBBF to fill: bf16 rows [..., S, D], or E4M3 bytes K-major "
                         "[..., D, S] (`bf16_copies(k_t=True)`)")
    if fold_v and (not fold_k or not deferred_with_scales(v) or v.vals_t is None or v.vals_t.shape[-2:] != (d, seq)):
        raise ValueError("dkdv(fold_v=True): needs fold_k=True, and V's token-block copy deferred with its block "
                         "scales given (v.off.scale) and Vᵀ's per-token bytes [..., D, S] (v.vals_t)")
    heads = range(b * hkv) if heads is None else heads
    if out is None:
        dk = torch.empty(b, hkv, seq, d, dtype=torch.bfloat16, device=q.vals.device)
        dv = torch.empty_like(dk)
    else:
        dk, dv = out
    if fold_v:  # V's rows come from Vᵀ's bytes in the kernel: K's descriptors stand in for VR's and VBR's (unread)
        vr = vbr = k.vals
    descs = list(fused.descriptors(q, k, do, qb, dot, vr, vbr, stats))
    # Vᵀ's per-token bytes in [D, BN] boxes (fold_v), else K's descriptor as a stand-in (unread)
    vt_desc = fused._cols_desc(v.vals_t, BN, gl.float8e4nv) if fold_v else descs[4]
    rho = tau  # unread without fp8_dk
    if fp8_dk is not None:
        q8t, rho = fp8_dk
        descs[2] = fused._cols_desc(q8t, BM, gl.float8e4nv)
    y_desc = descs[2] if ds_out is None else fused.ds_descriptor(ds_out, BN, BM)  # unread without ds_out
    _LAUNCH(
        (seq // BN, len(heads)),
        (*descs, k.scale, k.off.scale, v.scale, v.off.scale, tau, rho, dk, dv, kbf if fold_k else dk,
         kbbf if fold_k else dk, sm_scale * 1.4426950408889634, sm_scale, seq, hq // hkv, y_desc, heads.start,
         vt_desc),
        dict(**constexprs(), FP8_DK=fp8_dk is not None, DS_OUT=ds_out is not None, FOLD_K=fold_k,
             K_T=fold_k and k_t, FOLD_V=fold_v),
        dict(num_warps=fused.warps_for(BN), maxnreg=MAXNREG),
    )
    return dk, dv
