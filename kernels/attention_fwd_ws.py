"""FLAMIA forward kernel for sm_90, warp-specialized: FA3's schedule for the fp8 fast path.

`attention_fwd_gluon` runs three independent programs of 64 query rows per SM and leaves the overlap of one
program's softmax with another's products to the warp schedulers; counted at S = 8k, a tile took ~3.5× its
products plus its issue (docs/kernels.md, open item 1). Here one program owns 128 query rows and splits its warps
by job (`gl.warp_specialize`), as FlashAttention-3 does on Hopper:

- a producer warp (its registers lowered to 24 by `setmaxnreg`) streams K's and Vᵀ's tiles by TMA into a ring of
  shared-memory stages, each stage freed when both consumers have finished with it;
- two consumer warpgroups (240 registers a thread), 64 query rows each, read every streamed tile once for both.
  Per key tile t a consumer issues QKᵀ(t) and P·V(t - 1) together (P·V chained into one accumulator, as
  `attention_fwd_gluon`'s default), waits for QKᵀ(t) only and runs the softmax of tile t while P·V(t - 1) is on
  the tensor cores;
- with `PINGPONG` (off by default: measured slower, below) the consumers take turns to issue (an mbarrier pair):
  one's softmax runs while the other's products occupy the tensor cores, instead of both softmaxes landing at once.

The arithmetic of each 64-row half is `attention_fwd_gluon`'s chained variant's (pipe 3), operation for operation:
the off-diagonal tiles on the token-block copies, the diagonal tile on the per-token bytes with V's scale folded into
P, the integer row max, P's ×256, O's fp8 copy; Q quantized per token in the kernel (`q_raw`). Only the order in
which products are waited for changes, so O, the row statistics and the saved bytes are the same bits (a GPU test
compares them). Programs are 128 rows, a key tile's width, so both halves share one diagonal tile. Scope: that of
`attention_fwd_gluon.eligible`. Gluon has no interpreter: on the CPU this compiles for sm_90 only
(tests/test_kernel_registers.py).

Status (session 14, docs/kernels.md open item 1): a launch option (`pipe` 4, scripts' `:ws`), not the default. It
matches the chained kernel bit for bit on the H200 (tests/test_attention_gpu.py `ws_forward`) and ran the fp8 forward
in 1.758 ms at S = 8k against the chained kernel's 1.681 (3.148 against 3.057 at 16k; cuDNN 1.968 / 3.863), with the
ping-pong off, which measured faster than on (1.840 / 3.187). Written first with the diagonal tile's mask as
`gl.where(keep, s, -inf)`, it ran 1.98 ms: that `where` made ptxas serialize every wgmma of the kernel (C7511,
"insufficient register resources for the wgmma pipeline"), found by building the compile-only probe
(scripts/ws_forward_probe.py) up on the CPU; the mask is now a bias on capped scores (the diagonal tile below).
Nsight Compute on the unserialized kernel: the consumers issue on ~22% of their loop's samples with two math warps
per scheduler (the chained kernel runs three programs of four warps per SM), stalled mostly on fixed-latency
dependencies; each program's Q prologue and O epilogue are exposed, one program per SM. A persistent grid whose
producer runs ahead into the next program's tiles (session 15, 3539c43 and 07bec27, bit-identical on the H200) was
slower still: 1.974 ms at 8k against this grid's 1.860 and the chained kernel's 1.710 (3.666 / 3.237 / 3.078 at
16k), and dealing its items in snake order put spills into the inner loop (1.994 / 2.013 ms); reverted
(docs/kernels.md, open item 1).
"""
from __future__ import annotations

import torch

from . import attention_fwd_gluon as chained
from ._triton_env import HAS_GLUON
from .formats import FP8_TINY

if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )

    from .attention_fwd_gluon import (
        _diag_softmax,
        _finish_rows,
        _issue_tile,
        _off_softmax,
        _p_operand,
        _quantize_q_rows,
        _save_q_rows,
        _store_o_by_tma,
    )

PIPE = 4  # `attention_fwd.forward`'s launch option pipe that selects this kernel (pipes 0-3: attention_fwd_gluon)
BLOCK = chained.BLOCK  # key tile = token block = head dim; also the program's query rows (two consumers of 64)
HALF = BLOCK // 2  # one consumer warpgroup's rows (wgmma M = 64)
STAGES = 3  # K / Vᵀ tiles in the ring: a tile is released a full iteration before the producer needs its stage
PINGPONG = False  # 1.840 against 1.758 ms at 8k, 3.187 against 3.148 at 16k (session14_mask.sh)
CONSUMER_REGS = 240  # O, S(t) and P(t - 1) live at once (64 fp32 registers each)
PRODUCER_REGS = 24  # the minimum: the producer holds scalars only
# the launch's budget: 12 warps (the producer's warp rounds up to a warpgroup) share 65,536 registers; the default
# partition (consumer 0) gets what the workers leave: 168 × 384 − 240 × 128 − 24 × 128 = 240 × 128
MAXNREG = 168


if HAS_GLUON:

    @gluon.jit
    def _producer(kb_desc, vbt_desc, k_desc, vt_desc, k_smem, v_smem, ready, empty, kv_row, v_row, n_off,
                  STAGES: gl.constexpr, BLOCK: gl.constexpr):
        """Tiles 0 .. n_off into the ring: each stage once both consumers released its previous tile (a fresh
        mbarrier counts its phase before the first as complete, hence the first wait's parity 1)."""
        for t in range(0, n_off + 1):
            mbarrier.wait(empty.index(t % STAGES), ((t // STAGES) & 1) ^ 1)
            _issue_tile(t, n_off, kv_row, v_row, kb_desc, vbt_desc, k_desc, vt_desc, k_smem, v_smem, ready, STAGES,
                        BLOCK)

    @gluon.jit
    def _take_turn(turn, C: gl.constexpr, n, PINGPONG: gl.constexpr):
        """Wait until the other consumer has issued its n-th batch of products (consumer 0 goes first)."""
        if PINGPONG:
            mbarrier.wait(turn.index(C), (n & 1) ^ (1 - C))

    @gluon.jit
    def _pass_turn(turn, C: gl.constexpr, PINGPONG: gl.constexpr):
        if PINGPONG:
            mbarrier.arrive(turn.index(1 - C), count=1)

    @gluon.jit
    def _consumer(C: gl.constexpr, q_desc, o_desc, o8_desc, q_smem, o_smem, k_smem, v_smem, ready, empty, turn, q_bar,
                  QRAW, QS, KS, KBS, VS, VBS, OS, LSE2, MOFF, qk_scale, S, bh, bhk, diag, n_off,
                  D: gl.constexpr, BLOCK: gl.constexpr, BM: gl.constexpr, STAGES: gl.constexpr, SAFE: gl.constexpr,
                  SAVE_O8: gl.constexpr, TINY: gl.constexpr, FUSE_Q: gl.constexpr, PINGPONG: gl.constexpr,
                  P_ORDER: gl.constexpr):
        """Rows diag + C·BM .. + BM of the program: `attention_fwd_gluon`'s chained loop with QKᵀ(t) and
        P·V(t - 1) issued together and the softmax of tile t under P·V(t - 1)."""
        L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK, 32])
        P_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=L, k_width=4)  # fp8 A from registers
        ROW: gl.constexpr = gl.SliceLayout(1, L)
        COL: gl.constexpr = gl.SliceLayout(0, L)
        first = diag + C * BM
        q_s = q_smem.index(C)
        kvb_off = bhk.to(gl.int64) * (S // BLOCK)
        offs_m = first + gl.arange(0, BM, layout=ROW)
        if FUSE_Q:  # the producer's first tiles are in flight meanwhile
            q_scale = _quantize_q_rows(QRAW, q_s, bh, first, S, TINY, BM, D)
            _save_q_rows(QS, q_desc, q_s, q_scale, bh, first, S)  # always: this kernel has no save_q
            qs = gl.convert_layout(q_scale, ROW) * qk_scale
        else:
            bar = q_bar.index(C)
            mbarrier.expect(bar, q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(q_desc, [bh * S + first, 0], bar, q_s)
            qs = gl.load(QS + bh.to(gl.int64) * S + offs_m) * qk_scale
            mbarrier.wait(bar, 0)
        m_i = gl.full([BM], float("-inf"), gl.float32, ROW)
        l_i = gl.zeros([BM], gl.float32, ROW)
        acc = gl.zeros([BM, D], gl.float32, L)
        zero = gl.zeros([BM, BLOCK], gl.float32, L)
        cv = 1.0

        mbarrier.wait(ready.index(0), 0)
        s = warpgroup_mma(q_s, k_smem.index(0).permute((1, 0)), zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        if n_off > 0:
            p, m_i, l_i, alpha = _off_softmax(s, qs, m_i, l_i, gl.load(KBS + kvb_off))
            vsb = gl.load(VBS + kvb_off)
            # each tile's block scales are loaded a tile ahead: an L2 round trip outlasts one QKᵀ (as the chained
            # kernel's prefetch); the index is clamped to the diagonal block (n_off), never one past it
            kbs_next = gl.load(KBS + kvb_off + 1)
            vsb_next = gl.load(VBS + kvb_off + 1)
            for t in range(1, n_off + 1):  # t = n_off: the diagonal tile's scores, under the last P·V
                stage = t % STAGES
                prev = (t - 1) % STAGES
                kbs = kbs_next
                vsb_t = vsb_next
                nxt = gl.minimum(t + 1, n_off)
                kbs_next = gl.load(KBS + kvb_off + nxt)
                vsb_next = gl.load(VBS + kvb_off + nxt)
                mbarrier.wait(ready.index(stage), (t // STAGES) & 1)
                _take_turn(turn, C, t - 1, PINGPONG)
                s = warpgroup_mma(q_s, k_smem.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True)
                # P(t - 1) crosses the loop in fp32: an 8-bit register operand carried by a loop is unpacked to a
                # byte per register (attention_fwd_gluon, pipe 1)
                p8 = _p_operand(p, P_L, P_ORDER)
                acc = acc * (alpha * (cv / vsb))[:, None]
                acc = warpgroup_mma(p8, v_smem.index(prev).permute((1, 0)), acc, is_async=True)
                _pass_turn(turn, C, PINGPONG)
                s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))
                if t < n_off:
                    p, m_i, l_i, alpha = _off_softmax(s, qs, m_i, l_i, kbs)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
                mbarrier.arrive(empty.index(prev), count=1)
                cv = vsb
                vsb = vsb_t
        acc = acc * cv  # true units for the per-token diagonal product

        # the diagonal tile: per-token K and V, the causal mask, V's scale folded into P (r_i)
        stage = n_off % STAGES
        cols = diag + gl.arange(0, BLOCK, layout=COL)
        ks = gl.load(KS + bhk.to(gl.int64) * S + cols)
        vs = gl.load(VS + bhk.to(gl.int64) * S + cols)
        s = s * (qs[:, None] * ks[None, :])
        # the mask as a bias on capped scores: its `where` form makes ptxas serialize this kernel's wgmma (C7511)
        x, r, m_i, l_i, alpha = _diag_softmax(s, offs_m[:, None] >= cols[None, :], vs, m_i, l_i, SAFE, True)
        x8 = gl.convert_layout(x.to(gl.float8e4nv), P_L)
        pv = warpgroup_mma(x8, v_smem.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True)
        pv = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
        acc = acc * alpha[:, None] + pv * r[:, None]

        if FUSE_Q:
            tma.store_wait(0)  # Q's bytes have left q_s before O's fp8 copy reuses it
        o = _finish_rows(acc, m_i, l_i, LSE2, MOFF, bh, S, offs_m)
        _store_o_by_tma(o, o_smem.index(C), q_s, o_desc, o8_desc, OS, bh, S, first, offs_m, SAVE_O8, TINY)

    # one thin entry per consumer: a partition's arguments reach it as values, so its index C (a constexpr: it picks
    # the shared-memory slices and the turn barriers at compile time) cannot travel in the argument tuple
    @gluon.jit
    def _consumer0(q_desc, o_desc, o8_desc, q_smem, o_smem, k_smem, v_smem, ready, empty, turn, q_bar,
                   QRAW, QS, KS, KBS, VS, VBS, OS, LSE2, MOFF, qk_scale, S, bh, bhk, diag, n_off,
                   D: gl.constexpr, BLOCK: gl.constexpr, BM: gl.constexpr, STAGES: gl.constexpr, SAFE: gl.constexpr,
                   SAVE_O8: gl.constexpr, TINY: gl.constexpr, FUSE_Q: gl.constexpr, PINGPONG: gl.constexpr,
                   P_ORDER: gl.constexpr):
        _consumer(0, q_desc, o_desc, o8_desc, q_smem, o_smem, k_smem, v_smem, ready, empty, turn, q_bar, QRAW, QS, KS,
                  KBS, VS, VBS, OS, LSE2, MOFF, qk_scale, S, bh, bhk, diag, n_off, D, BLOCK, BM, STAGES, SAFE,
                  SAVE_O8, TINY, FUSE_Q, PINGPONG, P_ORDER)

    @gluon.jit
    def _consumer1(q_desc, o_desc, o8_desc, q_smem, o_smem, k_smem, v_smem, ready, empty, turn, q_bar,
                   QRAW, QS, KS, KBS, VS, VBS, OS, LSE2, MOFF, qk_scale, S, bh, bhk, diag, n_off,
                   D: gl.constexpr, BLOCK: gl.constexpr, BM: gl.constexpr, STAGES: gl.constexpr, SAFE: gl.constexpr,
                   SAVE_O8: gl.constexpr, TINY: gl.constexpr, FUSE_Q: gl.constexpr, PINGPONG: gl.constexpr,
                   P_ORDER: gl.constexpr):
        _consumer(1, q_desc, o_desc, o8_desc, q_smem, o_smem, k_smem, v_smem, ready, empty, turn, q_bar, QRAW, QS, KS,
                  KBS, VS, VBS, OS, LSE2, MOFF, qk_scale, S, bh, bhk, diag, n_off, D, BLOCK, BM, STAGES, SAFE,
                  SAVE_O8, TINY, FUSE_Q, PINGPONG, P_ORDER)

    @gluon.jit
    def _fwd_ws_kernel(q_desc, kb_desc, vbt_desc, k_desc, vt_desc, o_desc, o8_desc, QRAW, QS, KS, KBS, VS, VBS, OS,
                       LSE2, MOFF, qk_scale, S, G, D: gl.constexpr, BLOCK: gl.constexpr, BM: gl.constexpr,
                       STAGES: gl.constexpr, SAFE: gl.constexpr, SAVE_O8: gl.constexpr, TINY: gl.constexpr,
                       FUSE_Q: gl.constexpr, PINGPONG: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                       PRODUCER_REGS: gl.constexpr, P_ORDER: gl.constexpr = False):
        gl.static_assert(D == BLOCK, "one NVMMA layout serves the score and the output tiles")
        gl.static_assert(2 * BM == BLOCK, "the two consumers' rows share one diagonal tile")
        n_m = gl.num_programs(0)
        pid_m = n_m - 1 - gl.program_id(0)  # longest causal rows first
        bh = gl.program_id(1)
        bhk = bh // G
        diag = pid_m * BLOCK
        n_off = pid_m  # off-diagonal key tiles; tile n_off is the diagonal one

        q_smem = gl.allocate_shared_memory(q_desc.dtype, [2, BM, D], q_desc.layout)
        o_smem = gl.allocate_shared_memory(o_desc.dtype, [2, BM, D], o_desc.layout)
        k_smem = gl.allocate_shared_memory(kb_desc.dtype, [STAGES, BLOCK, D], kb_desc.layout)
        v_smem = gl.allocate_shared_memory(vbt_desc.dtype, [STAGES, D, BLOCK], vbt_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        q_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=2)  # both consumers release a stage
        for i in gl.static_range(2):
            mbarrier.init(turn.index(i), count=1)
            mbarrier.init(q_bar.index(i), count=1)
        kv_row = bhk * S  # K's rows in the [B·Hkv·S, D] view
        v_row = bhk * D  # Vᵀ's rows in the [B·Hkv·D, S] view
        # the argument tuples written out twice: a tuple bound to a name turns its constexprs into tensors
        gl.warp_specialize([
            (_consumer0, (q_desc, o_desc, o8_desc, q_smem, o_smem, k_smem, v_smem, ready, empty, turn, q_bar, QRAW, QS,
                          KS, KBS, VS, VBS, OS, LSE2, MOFF, qk_scale, S, bh, bhk, diag, n_off, D, BLOCK, BM, STAGES,
                          SAFE, SAVE_O8, TINY, FUSE_Q, PINGPONG, P_ORDER)),
            (_consumer1, (q_desc, o_desc, o8_desc, q_smem, o_smem, k_smem, v_smem, ready, empty, turn, q_bar, QRAW, QS,
                          KS, KBS, VS, VBS, OS, LSE2, MOFF, qk_scale, S, bh, bhk, diag, n_off, D, BLOCK, BM, STAGES,
                          SAFE, SAVE_O8, TINY, FUSE_Q, PINGPONG, P_ORDER)),
            (_producer, (kb_desc, vbt_desc, k_desc, vt_desc, k_smem, v_smem, ready, empty, kv_row, v_row, n_off, STAGES,
                         BLOCK))],
                           [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


def kernel_args(q, k, v, o, o8, o_scale, lse2, moff, q_raw, sm_scale: float) -> tuple:
    """The kernel's tensor arguments in order (descriptors, pointers, scalars but the constexprs); O and O8 reach
    it as TMA descriptors only."""
    seq = q.vals.shape[-2]
    return (*chained.descriptors(q, k, v), *chained.out_descriptors(o, o8, q.vals),
            q.vals if q_raw is None else q_raw, q.scale, k.scale, k.off.scale, v.scale, v.off.scale, o_scale, lse2,
            moff, sm_scale * 1.4426950408889634, seq, q.vals.shape[1] // k.vals.shape[1])


def constexprs(safeguards: bool, save_o8: bool, fuse_q: bool, stages: int = STAGES, pingpong: bool = PINGPONG,
               p_order: bool = False) -> dict:
    """p_order: V's copy in `formats.p_register_order` (`OffDiagonal.p_order`)."""
    return dict(D=BLOCK, BLOCK=BLOCK, BM=HALF, STAGES=stages, SAFE=safeguards, SAVE_O8=save_o8, TINY=FP8_TINY,
                FUSE_Q=fuse_q, PINGPONG=pingpong, CONSUMER_REGS=CONSUMER_REGS, PRODUCER_REGS=PRODUCER_REGS,
                P_ORDER=p_order)


@torch.compiler.disable  # as attention_fwd_gluon.forward: a Gluon launch, not traced
def forward(q, k, v, safeguards: bool, sm_scale: float, save_o8: bool, stages: int | None = None,
            q_raw: torch.Tensor | None = None, pingpong: bool = PINGPONG):
    """`attention_fwd_gluon.forward` (same arguments and outputs) on the warp-specialized kernel. stages: the
    K / Vᵀ ring, 2 to 4 (one program per SM)."""
    stages = STAGES if stages is None else stages
    if stages not in (2, 3, 4):
        raise ValueError(f"warp-specialized forward stages={stages}: allowed 2, 3, 4 (one program per SM)")
    b, hq, seq, d = q.vals.shape
    if seq % BLOCK:
        raise ValueError(f"warp-specialized forward: S={seq} must be a multiple of {BLOCK} (a program's rows)")
    dev = q.vals.device
    o = torch.empty(b, hq, seq, d, dtype=torch.bfloat16, device=dev)
    lse2 = torch.empty(b, hq, seq, dtype=torch.float32, device=dev)
    moff = torch.empty(b, hq, seq, dtype=torch.int8, device=dev)
    o8 = torch.empty(o.shape, dtype=torch.float8_e4m3fn, device=dev) if save_o8 else None
    o_scale = torch.empty_like(lse2) if save_o8 else lse2
    _fwd_ws_kernel[(seq // BLOCK, b * hq)](
        *kernel_args(q, k, v, o, o8, o_scale, lse2, moff, q_raw, sm_scale),
        **constexprs(safeguards, save_o8, q_raw is not None, stages, pingpong, v.off.p_order), num_warps=4,
        maxnreg=MAXNREG,
    )
    return o, lse2, moff, o8, o_scale
