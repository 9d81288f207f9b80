"""FLAMIA dK/dV kernel for sm_90 with its work in two warpgroups: `attention_dkdv_ws` split by accumulator.

Why: the warp-specialized dK/dV kernel (`attention_dkdv_ws`) holds both [64, D] fp32 accumulators in its one
consumer warpgroup, 128 of its 232 registers, and runs a sub-tile's whole chain there (Sᵀ and dPᵀ, P, the dV
operand, dSᵀ, two more products): ptxas cannot keep the next sub-tile's products in flight over it, and every
sub-tile ends waiting for its dV and dK products (Nsight Compute: the tensor pipe busy 41% of the time; docs/
benchmarks.md, session 22). A first split (session 23: the dV product alone in a second warpgroup) ran the whole
chain in one warp per scheduler and was slower (4.4 against 3.6 ms at S = 8k). Here one program per SM runs three
partitions, the chain cut in two:

- the **P warpgroup** (the default partition): Sᵀ = K·Qᵀ, P = exp2(…), the FP8 dV operand and the dV product (dV's
  accumulator); it hands p / l (`attention_bwd_gluon._p_over_l`, fp32) to the dS warpgroup through a ring of
  shared-memory slots;
- the **dS warpgroup** (a worker, 4 warps): dPᵀ = V·dOᵀ, dSᵀ from dPᵀ and p / l (`_dst_from`), the dK product (dK's
  accumulator);
- the **producer** (a worker, 1 warp, 24 registers): `attention_dkdv_ws._producer`'s TMA copies, unchanged; a ring
  stage and the per-token K / V rows are released by both warpgroups (mbarriers of count 2).

Off the diagonal each warpgroup runs three sub-tiles at once: while it works on sub-tile j, its product of j − 1 and
its score product of j + 1 are in flight; every product retires at the end of the step (an accumulator in flight
across the loop's back edge makes ptxas serialize every wgmma: C7514). The products, their shapes and order, and
the elementwise expressions are `attention_bwd_gluon`'s, so dK and dV are the fused kernel's bits (a GPU test
compares them). Launch option "ws_dkdv" = "split" of `attention_bwd.backward` (scripts' `:splitdkdv`). Scope:
`attention_bwd_gluon.eligible`'s. Gluon has no interpreter: on the CPU this compiles for sm_90 only
(tests/test_kernel_registers.py).
"""
from __future__ import annotations

import torch

from . import attention_bwd_gluon as fused
from ._triton_env import HAS_GLUON
from .attention_bwd_copies import STATS_ROWS
from .relaunch import Relaunch

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        mbarrier,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    from .attention_bwd_gluon import (
        _dkdv_smem,
        _dst_from,
        _dv_operand,
        _p_over_l,
        _release,
        _row_scales,
        _stats_row,
        _store_rows,
    )
    from .attention_dkdv_ws import _producer

BN, BM, TB = fused.BN, fused.BM, fused.TB
# ring stages: each warpgroup holds three sub-tiles' stages at once (j − 1's under its product, j, j + 1's under its
# score product), the P warpgroup runs up to U_STAGES sub-tiles ahead, the producer fills ahead of both
STAGES = 6
U_STAGES = 2  # p / l handed from the P warpgroup to the dS warpgroup ([BN, BM] fp32, 8 KB each)
PRODUCER_REGS = 24
DS_REGS = 240  # the dS warpgroup (a worker): its accumulator, two score tiles in flight, p / l, the statistics
# one program per SM: three warpgroups (the producer's warp rounds up to one) at 168 registers a thread, so the P
# warpgroup gets 3 × 168 − DS_REGS − PRODUCER_REGS = 240
MAXNREG = 168


if HAS_GLUON:
    P_ROLE = gl.constexpr(0)  # the P warpgroup: Sᵀ, P, the dV operand and product
    DS_ROLE = gl.constexpr(1)  # the dS warpgroup: dPᵀ, dSᵀ, the dK product

    @gluon.constexpr_function
    def _product_layout(role, d):
        """A role's accumulator layout: the P warpgroup's dV is an FP8 product (k 32), the dS warpgroup's dK a bf16
        one (k 16)."""
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                         instr_shape=[16, d, 32 if role == P_ROLE.value else 16])

    @gluon.jit
    def _score(kv_s, smems, stage, zero, ROLE: gl.constexpr):
        """The role's FP8 score product of a ring stage, issued: Sᵀ = K·Q8ᵀ (P) or dPᵀ = V·dO8ᵀ (dS)."""
        if ROLE == P_ROLE:
            rows = smems[0].index(stage)
        else:
            rows = smems[1].index(stage)
        return warpgroup_mma(kv_s, rows.permute((1, 0)), zero, use_acc=False, is_async=True)

    @gluon.jit
    def _accumulate(a, smems, stage, acc, ROLE: gl.constexpr):
        """The role's accumulating product, issued: dV += y·dO8 (P; dO8ᵀ's stage read K-major) or dK += dSᵀ·QB (dS)."""
        if ROLE == P_ROLE:
            return warpgroup_mma(a, smems[3].index(stage).permute((1, 0)), acc, is_async=True)
        else:
            return warpgroup_mma(a, smems[2].index(stage), acc, is_async=True)

    @gluon.jit
    def _operand(x, c, stage, smems, u_s, u_ready, u_empty, ks, vs, kbs, vbs, itau, qk_scale, offs_n, offs_m,
                 ROLE: gl.constexpr, DIAG: gl.constexpr, A_L: gl.constexpr, U_STAGES: gl.constexpr):
        """The A operand of sub-tile c's accumulating product from its retired score tile x, `_kv_tile`'s expressions
        (DIAG: per-token K and V, the causal mask; else the token-block copies' one K and one V scale). P: P from Sᵀ,
        p / l handed to the dS warpgroup, the FP8 dV operand. dS: p / l taken from the P warpgroup, dSᵀ in bf16."""
        st_s = smems[4].index(stage)
        QRY: gl.constexpr = gl.SliceLayout(0, x.type.layout)
        qs = _stats_row(st_s, 0, QRY)
        sdo = _stats_row(st_s, 4, QRY)
        i = c % U_STAGES
        if ROLE == P_ROLE:
            m = _stats_row(st_s, 1, QRY)
            linv = _stats_row(st_s, 2, QRY)
            if DIAG:
                x = x * (ks[:, None] * (qs * qk_scale)[None, :])
                x = gl.where(offs_n[:, None] <= offs_m[None, :], x, float("-inf"))
            else:
                x = x * (kbs * (qs * qk_scale))[None, :]
            pt = gl.exp2(x - (m - 8.0)[None, :])
            mbarrier.wait(u_empty.index(i), ((c // U_STAGES) & 1) ^ 1)
            u_s.index(i).store(pt)
            mbarrier.arrive(u_ready.index(i), count=1)  # release: the stores above are seen by the dS warpgroup
            return _dv_operand(pt, linv, sdo, itau, A_L)
        else:
            linv = _stats_row(st_s, 2, QRY)
            delta = _stats_row(st_s, 3, QRY)
            mbarrier.wait(u_ready.index(i), (c // U_STAGES) & 1)
            pt = u_s.index(i).load(x.type.layout)
            mbarrier.arrive(u_empty.index(i), count=1)  # release: ordered after the loads above
            u = _p_over_l(pt, linv)
            if DIAG:
                ds = _dst_from(u, x, vs[:, None], qs, delta, sdo)
            else:
                ds = _dst_from(u, x, vbs, qs, delta, sdo)
            return gl.convert_layout(ds, A_L)

    @gluon.jit
    def _off_step(j, c, x, a_prev, acc, kv_s, smems, ready, empty, u_s, u_ready, u_empty, kbs, vbs, itau, zero,
                  qk_scale, offs_n, ROLE: gl.constexpr, A_L: gl.constexpr, STAGES: gl.constexpr,
                  U_STAGES: gl.constexpr, ISSUE: gl.constexpr, PREFETCH: gl.constexpr):
        """Off-diagonal sub-tile j (ring stage c + j) of a role from its retired score tile x: PREFETCH, sub-tile
        j + 1's score product issued; j's operand (`_operand`) under it; then everything waited for. The dS
        warpgroup (ISSUE) first issues sub-tile j − 1's dK product (its operand a_prev), so that it runs under j's
        work too, and releases j − 1's stage; the P warpgroup issues j's dV product last (an FP8 operand carried
        across the loop's back edge costs ~40 byte moves a step) and releases j's stage. Returns j + 1's score tile
        (PREFETCH), j's operand and the accumulator."""
        stage = (c + j) % STAGES
        if ROLE == P_ROLE:
            held = stage
        else:
            held = (c + j - 1) % STAGES
            if ISSUE:
                acc = _accumulate(a_prev, smems, held, acc, ROLE)
        if PREFETCH:
            nxt = (c + j + 1) % STAGES
            mbarrier.wait(ready.index(nxt), ((c + j + 1) // STAGES) & 1)
            x_n = _score(kv_s, smems, nxt, zero, ROLE)
        else:
            x_n = x  # unread
        a = _operand(x, c + j, stage, smems, u_s, u_ready, u_empty, kbs, vbs, kbs, vbs, itau, qk_scale, offs_n,
                     offs_n, ROLE, False, A_L, U_STAGES)
        if ROLE == P_ROLE:
            acc = _accumulate(a, smems, stage, acc, ROLE)
        ISSUED: gl.constexpr = ISSUE or ROLE == P_ROLE  # an accumulating product in flight
        if ISSUED and PREFETCH:
            x_n, acc = warpgroup_mma_wait(num_outstanding=0, deps=(x_n, acc))
        elif ISSUED:
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        elif PREFETCH:
            x_n = warpgroup_mma_wait(num_outstanding=0, deps=(x_n,))
        if ISSUED:
            _release(empty, held)
        return x_n, a, acc

    @gluon.jit
    def _off_diagonal(c, n_off, acc, kv_s, smems, ready, empty, u_s, u_ready, u_empty, kbs, vbs, itau, zero,
                      qk_scale, offs_n, ROLE: gl.constexpr, A_L: gl.constexpr, STAGES: gl.constexpr,
                      U_STAGES: gl.constexpr):
        """A role's accumulator over one query head's n_off > 0 off-diagonal sub-tiles, ring stages c.. (`_off_step`:
        three sub-tiles at once)."""
        stage = c % STAGES
        mbarrier.wait(ready.index(stage), (c // STAGES) & 1)
        x = warpgroup_mma_wait(num_outstanding=0, deps=(_score(kv_s, smems, stage, zero, ROLE),))
        if ROLE == P_ROLE:  # unread: sub-tile 0 has no predecessor
            a = gl.zeros(zero.shape, gl.float8e4nv, A_L)
        else:
            a = gl.zeros(zero.shape, gl.bfloat16, A_L)
        if n_off > 1:
            x, a, acc = _off_step(0, c, x, a, acc, kv_s, smems, ready, empty, u_s, u_ready, u_empty, kbs, vbs, itau,
                                  zero, qk_scale, offs_n, ROLE, A_L, STAGES, U_STAGES, False, True)
            for j in range(1, n_off - 1):
                x, a, acc = _off_step(j, c, x, a, acc, kv_s, smems, ready, empty, u_s, u_ready, u_empty, kbs, vbs,
                                      itau, zero, qk_scale, offs_n, ROLE, A_L, STAGES, U_STAGES, True, True)
            x, a, acc = _off_step(n_off - 1, c, x, a, acc, kv_s, smems, ready, empty, u_s, u_ready, u_empty, kbs, vbs,
                                  itau, zero, qk_scale, offs_n, ROLE, A_L, STAGES, U_STAGES, True, False)
        else:
            x, a, acc = _off_step(0, c, x, a, acc, kv_s, smems, ready, empty, u_s, u_ready, u_empty, kbs, vbs, itau,
                                  zero, qk_scale, offs_n, ROLE, A_L, STAGES, U_STAGES, False, False)
        if ROLE == DS_ROLE:  # the last sub-tile's dK product
            last = (c + n_off - 1) % STAGES
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(_accumulate(a, smems, last, acc, ROLE),))
            _release(empty, last)
        return acc

    @gluon.jit
    def _partition(smems, kv_s, u_s, ready, empty, u_ready, u_empty, kv_ready, kv_free, XS, XBS, TAU, OUT, qk_scale,
                   sm_scale, S, G, D: gl.constexpr, BN: gl.constexpr, BM: gl.constexpr, TB: gl.constexpr,
                   STAGES: gl.constexpr, U_STAGES: gl.constexpr, ROLE: gl.constexpr):
        """A role's every sub-tile in the producer's order, then its accumulator stored: P, dV times each key's
        τ / 256 (XS / XBS: K's per-token and token-block scales, kv_s K's rows); dS, dK times the softmax scale (XS /
        XBS: V's, kv_s V's rows)."""
        S_L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BM, 32])
        O_L: gl.constexpr = _product_layout(ROLE, D)
        # its A operand from registers: FP8 (P) takes k_width 4, bf16 (dS) 2
        A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_L, k_width=4 if ROLE == P_ROLE else 2)
        KEY: gl.constexpr = gl.SliceLayout(1, S_L)
        QRY: gl.constexpr = gl.SliceLayout(0, S_L)

        first = gl.program_id(0) * BN
        bhk = gl.program_id(1)
        t = first // TB
        offs_n = first + gl.arange(0, BN, layout=KEY)
        xs = gl.load(XS + bhk.to(gl.int64) * S + offs_n)  # per-token scales of the diagonal's K (P) or V (dS)
        itau = _row_scales(TAU, bhk, S, offs_n)
        acc = gl.zeros([BN, D], gl.float32, O_L)
        zero = gl.zeros([BN, BM], gl.float32, S_L)
        mbarrier.wait(kv_ready, 0)
        c = 0
        n_diag = ((t + 1) * TB - first) // BM
        for _g in range(G):  # the query heads sharing this K / V head, in the producer's order
            for j in range(n_diag):
                stage = c % STAGES
                offs_m = first + j * BM + gl.arange(0, BM, layout=QRY)
                mbarrier.wait(ready.index(stage), (c // STAGES) & 1)
                x = warpgroup_mma_wait(num_outstanding=0, deps=(_score(kv_s, smems, stage, zero, ROLE),))
                a = _operand(x, c, stage, smems, u_s, u_ready, u_empty, xs, xs, xs, xs, itau, qk_scale, offs_n, offs_m,
                             ROLE, True, A_L, U_STAGES)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(_accumulate(a, smems, stage, acc, ROLE),))
                _release(empty, stage)
                c += 1
        mbarrier.arrive(kv_free, count=1)  # every product on the per-token rows has retired

        xbs = gl.load(XBS + bhk.to(gl.int64) * (S // TB) + t)
        mbarrier.wait(kv_ready, 1)
        n_off = (S - (t + 1) * TB) // BM
        for _g in range(G):
            if n_off > 0:
                acc = _off_diagonal(c, n_off, acc, kv_s, smems, ready, empty, u_s, u_ready, u_empty, xbs, xbs, itau,
                                    zero, qk_scale, offs_n, ROLE, A_L, STAGES, U_STAGES)
                c += n_off
        if ROLE == P_ROLE:
            offs_r = first + gl.arange(0, BN, layout=gl.SliceLayout(1, O_L))
            tau = gl.load(TAU + bhk.to(gl.int64) * S + offs_r)
            _store_rows(OUT, acc * (tau * (1.0 / 256.0))[:, None], bhk, S, first, BN, D)
        else:
            _store_rows(OUT, acc * sm_scale, bhk, S, first, BN, D)

    @gluon.jit
    def _dkdv_split_kernel(q_desc, do_desc, qb_desc, dot_desc, k_desc, kb_desc, vr_desc, vbr_desc, st_desc, KS, KBS,
                           VS, VBS, TAU, DK, DV, qk_scale, sm_scale, S, G, D: gl.constexpr, BN: gl.constexpr,
                           BM: gl.constexpr, TB: gl.constexpr, STAGES: gl.constexpr, U_STAGES: gl.constexpr,
                           STATS_ROWS: gl.constexpr, DS_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
        k_s, v_s, smems = _dkdv_smem((q_desc, do_desc, qb_desc, dot_desc, st_desc), k_desc, vr_desc, D, BM, STAGES,
                                     STATS_ROWS)
        # p / l in the scores' wgmma layout: each thread stores and loads 8-byte pairs, which the 128-byte swizzle
        # spreads over all banks
        u_s = gl.allocate_shared_memory(gl.float32, [U_STAGES, BN, BM],
                                        gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2))
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        u_ready = gl.allocate_shared_memory(gl.int64, [U_STAGES, 1], mbarrier.MBarrierLayout())
        u_empty = gl.allocate_shared_memory(gl.int64, [U_STAGES, 1], mbarrier.MBarrierLayout())
        kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        kv_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=2)  # released by both warpgroups
        for i in gl.static_range(U_STAGES):
            mbarrier.init(u_ready.index(i), count=1)
            mbarrier.init(u_empty.index(i), count=1)
        mbarrier.init(kv_ready, count=1)
        mbarrier.init(kv_free, count=2)  # K's rows read by the P warpgroup, V's by the dS warpgroup
        # the argument tuples written out in place: a tuple bound to a name turns its constexprs into tensors
        gl.warp_specialize([
            (_partition, (smems, k_s, u_s, ready, empty, u_ready, u_empty, kv_ready, kv_free, KS, KBS, TAU, DV,
                          qk_scale, sm_scale, S, G, D, BN, BM, TB, STAGES, U_STAGES, P_ROLE)),
            (_partition, (smems, v_s, u_s, ready, empty, u_ready, u_empty, kv_ready, kv_free, VS, VBS, TAU, DK,
                          qk_scale, sm_scale, S, G, D, BN, BM, TB, STAGES, U_STAGES, DS_ROLE)),
            (_producer, ((q_desc, do_desc, qb_desc, dot_desc, st_desc), (k_desc, kb_desc, vr_desc, vbr_desc),
                         smems, k_s, v_s, ready, empty, kv_ready, kv_free, S, G, BN, BM, TB,
                         STAGES, STATS_ROWS, False))],
            [4, 1], [DS_REGS, PRODUCER_REGS])


# launched through `relaunch.Relaunch`: Triton's launch path once per plan, the compiled launcher after that
_LAUNCH = Relaunch(_dkdv_split_kernel) if HAS_GLUON else None


def constexprs() -> dict:
    return dict(D=TB, BN=BN, BM=BM, TB=TB, STAGES=STAGES, U_STAGES=U_STAGES, STATS_ROWS=STATS_ROWS, DS_REGS=DS_REGS,
                PRODUCER_REGS=PRODUCER_REGS)


@torch.compiler.disable  # as attention_bwd_gluon.dkdv: a Gluon launch, not traced
def dkdv(q, k, v, do, copies, stats, tau, sm_scale: float):
    """`attention_bwd_gluon.dkdv` (same arguments and outputs) on the split kernel."""
    b, hq, seq, d = q.vals.shape
    hkv = k.vals.shape[1]
    qb, dot, _, _, vr, vbr = copies
    dk = torch.empty(b, hkv, seq, d, dtype=torch.bfloat16, device=q.vals.device)
    dv = torch.empty_like(dk)
    _LAUNCH(
        (seq // BN, b * hkv),
        (*fused.descriptors(q, k, do, qb, dot, vr, vbr, stats), k.scale, k.off.scale, v.scale, v.off.scale, tau, dk,
         dv, sm_scale * 1.4426950408889634, sm_scale, seq, hq // hkv),
        constexprs(),
        dict(num_warps=fused.warps_for(BN), maxnreg=MAXNREG),
    )
    return dk, dv
