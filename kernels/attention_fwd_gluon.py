"""FLAMIA forward kernel for sm_90 in Gluon: the fp8 fast path with its products in flight.

The Triton forward (`attention_fwd`) waits for every wgmma as soon as it is issued (the sm_90
SASS shows `WARPGROUP.DEPBAR.LE gsb0, 0x0` after each product), so a program's tensor-core time
and its softmax work add up, and Triton 3.6 offers no way to say otherwise. Gluon exposes the
Hopper primitives directly (TMA copies into a ring of shared-memory stages, asynchronous
`warpgroup_mma`, `warpgroup_mma_wait(num_outstanding)`), so this kernel overlaps them:

    iteration t:  issue QKᵀ of tile t          (async)
                  issue P·V of tile t - 1      (async, a fresh accumulator: FLAMIA.md's FP8 rule)
                  wait for QKᵀ only            -> softmax of tile t runs while P·V(t - 1) computes
                  wait for P·V(t - 1), fold it into acc, hand its stage to the TMA for tile t - 1 + STAGES

The arithmetic is `attention_fwd`'s, operation for operation (the off-diagonal tiles on the
token-block copies, the diagonal tile on the per-token bytes with V's scale folded into P, the
integer row max, P's fixed ×256 fp8 scale, O's per-token fp8 copy), so O, the row statistics and
the saved bytes are the same values; only when each product is waited for changes.

Scope (`eligible`): CUDA sm_90 exactly, fp8 `qk` and `pv`, D = 128, the token-block copies present
(K_OFF and V_OFF, i.e. safeguards may be on or off), causal, no document masking, no block-scaled
QKᵀ. Everything else runs the Triton kernel. With `q_raw` (the fast path's default, safeguards on)
each program quantizes its own 64 Q rows per token while the first K / Vᵀ tiles are in flight, puts
the bytes in shared memory for its QKᵀ products and stores them with their scales for the backward:
Q is read once in bf16 instead of read by a pre-pass, written in fp8 and read again. At the end each program
writes O (and O's fp8 copy) through shared memory by one TMA store each (`TMA_OUT`). The programs start
longest rows first across groups of `HEAD_CHUNK` heads, as a programmatic dependent launch of the key-sides pass
(`PDL`: Q quantized before `griddepcontrol.wait`), and a program whose rows start their key block runs the diagonal
tile over its first half only (`HALF_DIAG`); none of the three changes a bit. Gluon has no
interpreter, so on the CPU this module is compiled for sm_90 only (tests/test_kernel_registers.py);
the GPU tests compare it with the Triton kernel.
"""
from __future__ import annotations

import torch

from ._triton_env import HAS_GLUON, gluon_unavailable
from .buffers import carve
from .formats import FP8_TINY
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

BLOCK = 128  # key tile = token block = head dim of the fast path
# query rows per program: a warpgroup (wgmma M = 64) per 64 rows. 128 fits one program per SM at the chained
# variant's 168 registers (two at 128 would spill 1,648 B) and ran 2.16-2.19 ms against 1.50-1.55 at S = 8k
# (session11_wide.sh)
BM = 64
STAGES = 3  # K / Vᵀ tiles in flight: 3 × 32 KB + Q's 8 KB, two programs fit in 227 KB
PIPE = 3  # the default: one chained accumulator, three programs per SM (module docstring)
# O and its fp8 copy written through shared memory by TMA (one copy each) instead of each thread's scattered stores
TMA_OUT = True
CHAIN_STAGES = 2  # the chained variant's ring: three programs per SM of 2 × 32 KB + Q's 8 KB
MAXNREG_CHAIN = 168  # 65536 registers / (3 programs × 128 threads), rounded down to a multiple of 8
# V's token-block copy written with its keys in P's register order (`formats.p_register_order`, `_p_operand`) where
# this kernel reads it: the P tile then needs no layout exchange before its P·V product. On an H100 (session 34, call
# 1, a4d9a88) the kernel 1397 -> 1285 µs at 8k with the pass unchanged (193 µs), the same bits for every variant and
# the fp8 prefix tests passed with it on: the forward 1.06 -> 1.17x cuDNN at 8k, 1.15 -> 1.29x at 16k
P_ORDER = True
# the chained loop refills the previous tile's ring stage right after issuing QKᵀ(t), under that product, instead of
# after P·V(t) retires: the TMA issue (three CTA barriers, ~40 instructions) then leaves the path from one P·V's end
# to the next QKᵀ's issue; each tile's load starts that much later. The same bits (a launch option, "refill_qk")
REFILL_UNDER_QK = False
# programs launched longest rows first across groups of this many heads (0: head after head, each head's longest rows
# first). Head after head, the last head's longest programs start near the end and run on alone: a list-scheduling
# count of the 8k grid (8192 programs of 1-64 tiles on 396 slots) puts the makespan at 1.050x the ideal, 1.008x with
# groups of 8, 1.004x with 16 (`launch_order`). On an H100 (session 35, 0d2d216) groups of 4-32 heads took the
# forward 1.5-2.5% below head after head at 8k-32k; all 64 heads of the 8k grid at once took it 40% above (their K
# and V tiles no longer stay in L2), 32 showed the first sign of it (+3% in one profile), so 8
HEAD_CHUNK = 8
# programmatic dependent launch: the kernel is launched while the key-sides pass before it runs its last programs
# (`quantize.quantize_fp8_key_sides(launch_dependents=True)`), quantizes its Q rows into shared memory, then waits for
# that pass's outputs (`griddepcontrol.wait`) before its first read or write of anything but Q. On an H100 (session
# 35) the kernel starts ~7 µs before the pass ends: 8k forward 1.602 -> 1.587 ms with groups of 8 heads
PDL = True
# the chained variant's diagonal tile over the first half of its keys only where the program's rows start their key
# block (no row of theirs sees the second half): half of each product and of the softmax on half the programs'
# diagonal tiles, ~0.9% of the tile work at 8k (a launch option, "half_diag"; safeguards on only). On an H100 (session
# 35, c3c4220) the same bits (GPU test) and the kernel 1274.0 -> 1259.9 µs at 8k
HALF_DIAG = True
# the accumulator's rescale to true units before the diagonal tile kept where it is written (`_kept_here`). Without
# it, where O's fp8 copy is not written (a forward nothing differentiates, or dO in bf16), LLVM sank those 64 FMULs a
# thread past the diagonal's QKᵀ and ptxas then serialized every wgmma of the kernel, the loop's included (C7512,
# "insufficient register resources": 44 waited-for QGMMA where the kernel has 12 waits); with it that kernel
# compiles as the one that writes O8 (found in session 37 with scripts/kernel_registers.py --no-grad). The same bits:
# a module switch for A/B timing
PIN_RESCALE = True


def half_diag_applies(half_diag: bool | None, pipe: int) -> bool:
    """Whether a launch runs the half diagonal tile (`HALF_DIAG` where half_diag is None): the chained variant (pipe
    3) only, whose loop leaves the diagonal tile's scores to after it; the kernel reads HALF_DIAG there only, so this
    is what its constexpr is for every launch (and for scripts/kernel_registers.py's labels)."""
    return (HALF_DIAG if half_diag is None else bool(half_diag)) and pipe == 3


def constexprs(safeguards: bool, save_o8: bool, fuse_q: bool, pipe: int = PIPE, stages: int | None = None,
               p_order: bool = P_ORDER, refill_under_qk: bool | None = None, head_chunk: int | None = None,
               pdl: bool | None = None, save_q: bool = True, half_diag: bool | None = None) -> dict:
    """The kernel's constexprs for a launch (`forward`'s arguments, None: the module's default), also what
    scripts/kernel_registers.py compiles, so that the report is of the kernel a launch runs. fuse_q: Q quantized in
    the kernel (`forward`'s q_raw); without it the kernel reads Q's bytes and writes none (SAVE_Q)."""
    return dict(D=BLOCK, BLOCK=BLOCK, BM=BM, STAGES=default_stages(pipe) if stages is None else stages, SAFE=safeguards,
                SAVE_O8=save_o8, TINY=FP8_TINY, PIPE=pipe, FUSE_Q=fuse_q, TMA_OUT=TMA_OUT, P_ORDER=p_order,
                REFILL_UNDER_QK=REFILL_UNDER_QK if refill_under_qk is None else refill_under_qk,
                HEAD_CHUNK=HEAD_CHUNK if head_chunk is None else head_chunk, PDL=PDL if pdl is None else bool(pdl),
                SAVE_Q=save_q or not fuse_q, HALF_DIAG=half_diag_applies(half_diag, pipe), PIN_RESCALE=PIN_RESCALE)


def default_stages(pipe: int) -> int:
    """Stages of the ring per variant: the chained one runs three programs per SM, whose shared memory
    holds two stages each (3 × 72 KB); the others two programs of three stages (2 × 104 KB)."""
    return CHAIN_STAGES if pipe == 3 else STAGES


def launch_order(n_m: int, n_bh: int, head_chunk: int) -> list[tuple[int, int]]:
    """(pid_m, bh) of each program in launch order (the kernel's `_program_tile`, written again in Python for the
    tests): with head_chunk 0 head after head, each head's longest causal rows (the last row block) first; else the
    heads in groups of head_chunk, within a group the longest rows of every head first, then the next longest."""
    if head_chunk < 0:
        raise ValueError(f"head_chunk={head_chunk}: allowed 0 (head after head) or a group size >= 1")
    order = []
    for p in range(n_m * n_bh):
        if head_chunk == 0:
            rank, bh = p % n_m, p // n_m
        else:
            chunk, r = divmod(p, head_chunk * n_m)
            heads = min(n_bh - chunk * head_chunk, head_chunk)
            rank, bh = r // heads, chunk * head_chunk + r % heads
        order.append((n_m - 1 - rank, bh))
    return order


def unsupported(x: torch.Tensor, spec, causal: bool, has_doc: bool) -> str | None:
    """None when the Gluon kernel supports a forward of these inputs (x: Q or its bytes, for the device and
    the head dim), else why not: `eligible`'s checks that need no operand, which the caller can make
    before the pre-pass (`attention_fwd.plan`)."""
    why = gluon_unavailable(x)
    if why is not None:
        return why
    if spec.qk != "fp8" or spec.pv != "fp8":
        return f"qk={spec.qk}, pv={spec.pv}: the fp8 fast path only"
    if x.shape[-1] != BLOCK:
        return f"head dim {x.shape[-1]}: {BLOCK} only"
    if not causal or has_doc:
        return "causal, without document masking, only"
    return None


def eligible(q, k, v, spec, causal: bool, doc, q_raw, qk_mx: bool) -> str | None:
    """None when the Gluon kernel can run this forward, else why not (for a benchmark's log). q_raw
    (fused Q quantization) is checked by `attention_fwd.forward`, the same for both kernels."""
    why = unsupported(q.vals, spec, causal, doc is not None)
    if why is not None:
        return why
    if qk_mx:
        return "a block-scaled QKᵀ: the fp8 fast path only"
    if k.off is None or v.off is None:
        return "no token-block K / V copies"
    return None


if HAS_GLUON:

    @gluon.jit
    def _issue_tile(t, n_off, kv_row, v_row, kb_desc, vbt_desc, k_desc, vt_desc, k_smem, v_smem, ready,
                    STAGES: gl.constexpr, BLOCK: gl.constexpr):
        """TMA of key tile t into stage t % STAGES: the token-block copies off the diagonal (t < n_off),
        the per-token bytes for the diagonal tile (t == n_off)."""
        stage = t % STAGES
        bar = ready.index(stage)
        mbarrier.expect(bar, kb_desc.block_type.nbytes + vbt_desc.block_type.nbytes)
        if t < n_off:
            tma.async_copy_global_to_shared(kb_desc, [kv_row + t * BLOCK, 0], bar, k_smem.index(stage))
            tma.async_copy_global_to_shared(vbt_desc, [v_row, t * BLOCK], bar, v_smem.index(stage))
        else:
            tma.async_copy_global_to_shared(k_desc, [kv_row + t * BLOCK, 0], bar, k_smem.index(stage))
            tma.async_copy_global_to_shared(vt_desc, [v_row, t * BLOCK], bar, v_smem.index(stage))

    @gluon.jit
    def _kept_here(x):
        """x unchanged, through an asm statement LLVM may not move (`is_pure=False`): the instructions that compute x
        stay before the side-effecting operations that follow it in the source (`PIN_RESCALE`). ptxas drops the
        moves."""
        return gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=gl.float32, is_pure=False, pack=1)

    @gluon.jit
    def _program_tile(HEAD_CHUNK: gl.constexpr):
        """(pid_m, bh): the query-row block and the head this program computes, `launch_order`'s mapping of its
        launch index (blockIdx.x fastest, the order the block scheduler starts programs in)."""
        n_m = gl.num_programs(0)
        if HEAD_CHUNK == 0:
            rank = gl.program_id(0)
            bh = gl.program_id(1)
        else:
            span = HEAD_CHUNK * n_m
            p = gl.program_id(1) * n_m + gl.program_id(0)
            chunk = p // span
            r = p - chunk * span
            heads = gl.minimum(gl.num_programs(1) - chunk * HEAD_CHUNK, HEAD_CHUNK)  # the last group may be short
            rank = r // heads
            bh = chunk * HEAD_CHUNK + (r - rank * heads)
        return n_m - 1 - rank, bh

    @gluon.jit
    def _wait_for_prior_grid():
        """`griddepcontrol.wait`: until the kernel launched before this one (under programmatic dependent launch)
        has finished and its writes are visible; returns at once in a kernel launched without it."""
        gl.inline_asm_elementwise("griddepcontrol.wait; // dummy $0", "=r", [], dtype=gl.int32, is_pure=False,
                                  pack=1)

    @gluon.jit
    def _row_max(s):
        """gl.max(s, 1) as a tree of halves: the exponentials wait on the row max, and a reduction in
        register order is a chain of C/4 dependent FMNMX per thread (sm_90 SASS), the halves' depth
        is log2 of that. The same instructions, and the same value (a max is exact in any order)."""
        R: gl.constexpr = s.shape[0]
        C: gl.constexpr = s.shape[1]
        x = s
        for i in gl.static_range(4):  # the column bits a thread holds in registers (NVMMA layout)
            x = gl.max(gl.reshape(x, [R, 2, C // (2 << i)]), 1)
        return gl.convert_layout(gl.max(x, 1), gl.SliceLayout(1, s.type.layout))

    @gluon.jit
    def _p_operand(p, P_L: gl.constexpr, P_ORDER: gl.constexpr):
        """An off-diagonal tile's P (fp32, the scores' accumulator layout) as the fp8 A operand of its P·V product.
        P_ORDER (V's copy in `formats.p_register_order`): P's columns are put in that order too, which makes the
        operand's layout the accumulator's own registers, two bytes of each F2FP pair per register: the layout
        conversion is free (sm_90 SASS of the chained loop: 16 SHFL.IDX, 16 SEL and 16 PRMT a tile fewer, 532 ->
        485 instructions). Else P keeps key order and the conversion exchanges bytes between threads."""
        p8 = p.to(gl.float8e4nv)
        if P_ORDER:
            R: gl.constexpr = p8.shape[0]
            C: gl.constexpr = p8.shape[1]
            p8 = gl.reshape(gl.permute(gl.reshape(p8, [R, C // 32, 2, 2, 4, 2]), [0, 1, 2, 4, 3, 5]), [R, C])
        return gl.convert_layout(p8, P_L)

    @gluon.jit
    def _off_softmax(s, qs, m_i, l_i, kbs):
        """`attention_fwd._fwd_off_tile`'s softmax (K_OFF): one K scale per tile, c = s_q·c·s_kb per
        row, the integer row max, p = exp2(s·c - M + 8) (P's ×256). Returns (p, m, l, alpha)."""
        c = qs * kbs
        m_new = gl.maximum(m_i, gl.ceil(_row_max(s) * c))
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(s * c[:, None] - (m_new - 8.0)[:, None])
        l_i = l_i * alpha + gl.sum(p, 1)
        return p, m_new, l_i, alpha

    @gluon.jit
    def _diag_softmax(s, keep, vs, m_i, l_i, SAFE: gl.constexpr, MASK_AS_BIAS: gl.constexpr):
        """The diagonal tile's softmax (`attention_fwd._fwd_diag_tile`): s the scaled scores, keep the causal mask,
        vs V's per-token scales. Returns (x, r, m, l, alpha): x = P·s_v / r_i, V's scale folded into P with r_i
        the max of V's scales over the keys row i sees (SAFE; leaky: over the whole tile).
        MASK_AS_BIAS (attention_fwd_ws): written `gl.where(keep, s, -inf)` the mask makes ptxas serialize every wgmma
        of the warp-specialized kernel (C7511; found by building scripts/ws_forward_probe.py up on the CPU), as a
        bias it does not. A bias alone would turn a future key's +inf or NaN score into NaN in a masked place (a
        causal leak), so the scores are first capped at the largest float (min.f32 returns the other operand for a
        NaN): masked places are -inf for every input; a visible +inf or NaN score becomes FLT_MAX (the row then
        comes out finite where `where` gives NaN)."""
        if MASK_AS_BIAS:
            s = gl.minimum(s, 3.4028234663852886e38) + gl.where(keep, 0.0, float("-inf"))
        else:
            s = gl.where(keep, s, float("-inf"))
        if SAFE:  # V-scale max over the keys row i sees
            r = gl.max(gl.where(keep, vs[None, :], 0.0), 1)
            r = gl.where(r > 0.0, r, 1.0)
        else:  # leaky: the whole tile, future keys included
            r = gl.zeros_like(l_i) + gl.max(vs, 0)
        m_new = gl.maximum(m_i, gl.ceil(gl.max(s, 1)))
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(s - (m_new - 8.0)[:, None])
        l_i = l_i * alpha + gl.sum(p, 1)
        x = p * vs[None, :] * gl.div_rn(gl.full_like(l_i, 1.0), r)[:, None]
        return x, r, m_new, l_i, alpha

    @gluon.jit
    def _diag_products(s, cols, rows, qs, m_i, l_i, v_op, zero_acc, KS, VS, bhk, S, A_L: gl.constexpr,
                       SAFE: gl.constexpr):
        """The diagonal tile's softmax and P·V from its raw scores s (Q8·K8ᵀ over the keys `cols`, the rows `rows` in
        s's layout): per-token K and V, the causal mask, V's scale folded into P (r_i). Returns (P·V, r, m, l, α);
        `_diag_tile` and `_half_diag_tile` fold them into the accumulator."""
        ks = gl.load(KS + bhk.to(gl.int64) * S + cols)
        vs = gl.load(VS + bhk.to(gl.int64) * S + cols)
        s = s * (qs[:, None] * ks[None, :])
        x, r, m_i, l_i, alpha = _diag_softmax(s, rows[:, None] >= cols[None, :], vs, m_i, l_i, SAFE, False)
        pv = warpgroup_mma(gl.convert_layout(x.to(gl.float8e4nv), A_L), v_op, zero_acc, use_acc=False, is_async=True)
        pv = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
        return pv, r, m_i, l_i, alpha

    @gluon.jit
    def _diag_tile(acc, m_i, l_i, s, v_tile, zero, qs, KS, VS, bhk, S, diag, offs_m, P_L: gl.constexpr,
                   BLOCK: gl.constexpr, SAFE: gl.constexpr):
        """The diagonal tile from its raw scores s (Q8·K8ᵀ of the tile's BLOCK keys): returns (acc, m, l) with the
        tile's P·V added (`_diag_products`)."""
        cols = diag + gl.arange(0, BLOCK, layout=gl.SliceLayout(0, s.type.layout))
        pv, r, m_i, l_i, alpha = _diag_products(s, cols, offs_m, qs, m_i, l_i, v_tile.permute((1, 0)), zero, KS, VS,
                                                bhk, S, P_L, SAFE)
        return acc * alpha[:, None] + pv * r[:, None], m_i, l_i

    @gluon.jit
    def _half_diag_tile(acc, m_i, l_i, q_smem, k_tile, v_tile, qs, KS, VS, bhk, S, diag, offs_m, BM: gl.constexpr,
                        BLOCK: gl.constexpr, NW: gl.constexpr, SAFE: gl.constexpr):
        """`_diag_tile` for a program whose rows are the first half of their key block: no row sees the block's
        second half, so both products run over its first BLOCK // 2 keys (QKᵀ of N = 64, P·V of K = 64)."""
        HALF: gl.constexpr = BLOCK // 2
        LH: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                     instr_shape=[16, HALF, 32])
        L: gl.constexpr = acc.type.layout
        PH_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=L, k_width=4)
        ROWH: gl.constexpr = gl.SliceLayout(1, LH)
        s = warpgroup_mma(q_smem, k_tile.slice(0, HALF).permute((1, 0)), gl.zeros([BM, HALF], gl.float32, LH),
                          use_acc=False, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        cols = diag + gl.arange(0, HALF, layout=gl.SliceLayout(0, LH))
        pv, r, m_h, l_h, alpha = _diag_products(s, cols, gl.convert_layout(offs_m, ROWH), gl.convert_layout(qs, ROWH),
                                                gl.convert_layout(m_i, ROWH), gl.convert_layout(l_i, ROWH),
                                                v_tile.slice(0, HALF, dim=1).permute((1, 0)), gl.zeros_like(acc), KS,
                                                VS, bhk, S, PH_L, SAFE)
        ROW: gl.constexpr = gl.SliceLayout(1, L)
        alpha = gl.convert_layout(alpha, ROW)
        r = gl.convert_layout(r, ROW)
        return acc * alpha[:, None] + pv * r[:, None], gl.convert_layout(m_h, ROW), gl.convert_layout(l_h, ROW)

    @gluon.jit
    def _fp8_row_quotients(x, TINY: gl.constexpr):
        """Per-row fp8 of an fp32 tile as `quantize._fp8_row_codes` on the GPU, up to the E4M3 conversion:
        (quotients x / scale, scale, finite). amax is an integer max over the fp32 bit patterns (keeps NaN),
        the scale an IEEE division, the quotients `quantize._div_by_shared`'s (one IEEE reciprocal per row
        and Markstein's correction: div_rn's E4M3 bytes, tests/test_quantize_division.py). finite: a
        scalar, True when no element is NaN or ±Inf, so no quotient is NaN and the hardware's bytes need
        no fix (`_e4m3_bytes`)."""
        amax_bits = gl.max(x.to(gl.int32, bitcast=True) & 0x7FFFFFFF, 1)
        amax = amax_bits.to(gl.float32, bitcast=True)
        amax = gl.where(amax < TINY, TINY, amax)
        scale = gl.div_rn(amax, gl.full(amax.shape, 448.0, gl.float32, amax.type.layout))
        rcp = gl.div_rn(gl.full(amax.shape, 1.0, gl.float32, amax.type.layout), scale)
        rem_scale = gl.where(rcp == 0.0, 0.0, scale)  # x / Inf = ±0 (see `_div_by_shared`)
        q0 = x * rcp[:, None]
        rem = gl.fma(q0, gl.broadcast(rem_scale[:, None], x)[0], x * -1.0)  # negated: keeps -0
        v = gl.fma(rem, gl.broadcast((rcp * -1.0)[:, None], x)[0], q0)
        return v, scale, gl.max(amax_bits, 0) < 0x7F800000

    @gluon.jit
    def _e4m3_bytes(v):
        """E4M3 bytes (uint8) of v as `quantize._e4m3_code` on the GPU: the hardware's nearest-even,
        saturating conversion, NaN as 0x7F | sign (the hardware drops NaN's sign). Only tiles holding a
        NaN or ±Inf need it; finite ones store `v.to(gl.float8e4nv)`: the fix unpacks the hardware's
        byte pairs into a register per byte (~4 more sm_90 instructions per element)."""
        byte = v.to(gl.float8e4nv).to(gl.uint8, bitcast=True).to(gl.int32)
        sign = (v.to(gl.int32, bitcast=True) >> 24) & 0x80
        return gl.where(v != v, 0x7F | sign, byte).to(gl.uint8)

    @gluon.jit
    def _store_e4m3(smem, v, finite):
        """v's E4M3 bytes into smem (`_e4m3_bytes`' values): the hardware's bytes, stored again with the fix where
        the tile holds a NaN or ±Inf. Not `if finite: store(a) else: store(b)`: LLVM sinks those two stores into
        one after the branch, and in a persistent warp-specialized forward (a loop around this; e4b654c, 3539c43)
        ptxas then built each pair's second byte from a stale register (the SASS's F2FP ... MERGE_C on a value
        reloaded from the stack: every odd byte of O's fp8 copy wrong on the H200). Here the finite path's stores
        are the hardware's byte pairs as before; a tile with a NaN or ±Inf stores twice."""
        smem.store(v.to(gl.float8e4nv))
        if not finite:
            smem.store(_e4m3_bytes(v).to(gl.float8e4nv, bitcast=True))

    @gluon.jit
    def _finish_rows(acc, m_i, l_i, LSE2, MOFF, bh, S, offs_m):
        """O = acc / l in bf16 (returned) and the rows' saved statistics: lse2 and the M offset
        (`reference.pack_stats`)."""
        o = (acc / l_i[:, None]).to(gl.bfloat16)
        lse2 = (m_i - 8.0) + gl.log2(l_i)  # l carries P's ×256, as in the Triton kernel
        gl.store(LSE2 + bh.to(gl.int64) * S + offs_m, lse2)
        gl.store(MOFF + bh.to(gl.int64) * S + offs_m, (gl.floor(lse2) - m_i).to(gl.int8))
        return o

    @gluon.jit
    def _store_o_by_tma(o, o_smem, o8_smem, o_desc, o8_desc, OS, bh, S, first, offs_m, SAVE_O8: gl.constexpr,
                        TINY: gl.constexpr):
        """O's rows (and, with SAVE_O8, their per-token fp8 copy, its scales to OS) through shared memory and one
        TMA store each (`TMA_OUT`), waited for: o_smem and o8_smem are free again on return."""
        o_smem.store(o)
        if SAVE_O8:
            v, os, finite = _fp8_row_quotients(o.to(gl.float32), TINY)
            gl.store(OS + bh.to(gl.int64) * S + offs_m, os)
            _store_e4m3(o8_smem, v, finite)
        fence_async_shared()  # the generic-proxy stores, seen by the TMA (async proxy)
        gl.thread_barrier()  # every warp's rows are in before one thread issues the copies
        tma.async_copy_shared_to_global(o_desc, [bh * S + first, 0], o_smem)
        if SAVE_O8:
            tma.async_copy_shared_to_global(o8_desc, [bh * S + first, 0], o8_smem)
        tma.store_wait(0)

    @gluon.jit
    def _quantize_q_rows(QRAW, q_smem, bh, first, S, TINY: gl.constexpr, BM: gl.constexpr, D: gl.constexpr):
        """The program's BM rows of bf16 Q, quantized per token as the pre-pass does
        (`quantize.quantize_fp8_per_token`: the same bytes and scales on the GPU), into `q_smem` for the
        QKᵀ products (`_save_q_rows` stores them for the backward). Returns the fp32 scales [BM]
        (SliceLayout(1, QL)).
        QL gives a thread 32 consecutive elements of a row: 16-byte loads and shared-memory stores, a row
        shared by four threads (two shuffles per reduction); the products' layout loads 4-byte pairs and
        stores bytes in pairs (the sm_90 prologue grew by ~950 instructions there, by ~600 on QL's finite
        path)."""
        QL: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 32], threads_per_warp=[8, 4],
                                            warps_per_cta=[BM // 16, 1], order=[1, 0])
        rows = gl.arange(0, BM, layout=gl.SliceLayout(1, QL))
        cols = gl.arange(0, D, layout=gl.SliceLayout(0, QL))
        base = QRAW + (bh.to(gl.int64) * S + first) * D
        x = gl.load(base + rows[:, None] * D + cols[None, :]).to(gl.float32)
        v, scale, finite = _fp8_row_quotients(x, TINY)
        _store_e4m3(q_smem, v, finite)
        fence_async_shared()  # the generic-proxy stores, seen by the async proxy (wgmma, TMA)
        gl.thread_barrier()  # every warp's rows are in before the warpgroup's products read them
        return scale

    @gluon.jit
    def _save_q_rows(QS, q_desc, q_smem, scale, bh, first, S):
        """`_quantize_q_rows`' bytes to Q8 (a TMA store from q_smem, waited for at the program's end) and its scales
        to QS, for the backward."""
        rows = gl.arange(0, scale.shape[0], layout=scale.type.layout)
        gl.store(QS + bh.to(gl.int64) * S + first + rows, scale)
        tma.async_copy_shared_to_global(q_desc, [bh * S + first, 0], q_smem)

    @gluon.jit
    def _fwd_gluon_kernel(q_desc, kb_desc, vbt_desc, k_desc, vt_desc, o_desc, o8_desc, QRAW, QS, KS, KBS, VS, VBS, O,
                          O8, OS, LSE2, MOFF, qk_scale, S, G, D: gl.constexpr, BLOCK: gl.constexpr, BM: gl.constexpr,
                          STAGES: gl.constexpr, SAFE: gl.constexpr, SAVE_O8: gl.constexpr, TINY: gl.constexpr,
                          PIPE: gl.constexpr, FUSE_Q: gl.constexpr, TMA_OUT: gl.constexpr,
                          P_ORDER: gl.constexpr = False, REFILL_UNDER_QK: gl.constexpr = False,
                          HEAD_CHUNK: gl.constexpr = 0, PDL: gl.constexpr = False, SAVE_Q: gl.constexpr = True,
                          HALF_DIAG: gl.constexpr = False, PIN_RESCALE: gl.constexpr = False):
        gl.static_assert(D == BLOCK, "one NVMMA layout serves the score and the output tiles")
        NW: gl.constexpr = BM // 16  # a warpgroup per 64 rows
        L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, BLOCK, 32])
        P_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=L, k_width=4)  # fp8 A from registers
        ROW: gl.constexpr = gl.SliceLayout(1, L)
        COL: gl.constexpr = gl.SliceLayout(0, L)

        pid_m, bh = _program_tile(HEAD_CHUNK)  # longest causal rows first, as the Triton kernel
        bhk = bh // G
        first = pid_m * BM
        diag = first // BLOCK * BLOCK
        n_off = diag // BLOCK  # off-diagonal key tiles; tile n_off is the diagonal one
        kv_row = bhk * S  # K's rows in the [B·Hkv·S, D] view
        v_row = bhk * D  # Vᵀ's rows in the [B·Hkv·D, S] view
        kvb_off = bhk.to(gl.int64) * (S // BLOCK)

        q_smem = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
        k_smem = gl.allocate_shared_memory(kb_desc.dtype, [STAGES, BLOCK, D], kb_desc.layout)
        v_smem = gl.allocate_shared_memory(vbt_desc.dtype, [STAGES, D, BLOCK], vbt_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
        mbarrier.init(q_bar, count=1)

        if FUSE_Q and PDL:  # Q's rows into shared memory while the key-sides pass finishes (Q was written before it)
            q_scale = _quantize_q_rows(QRAW, q_smem, bh, first, S, TINY, BM, D)
        if PDL:  # nothing of the pass's (K's and V's bytes, their scales) is read, nor anything written, before this
            _wait_for_prior_grid()
        if not FUSE_Q:
            mbarrier.expect(q_bar, q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(q_desc, [bh * S + first, 0], q_bar, q_smem)
        for i in gl.static_range(STAGES):
            if i <= n_off:
                _issue_tile(i, n_off, kv_row, v_row, kb_desc, vbt_desc, k_desc, vt_desc, k_smem, v_smem, ready,
                            STAGES, BLOCK)

        offs_m = first + gl.arange(0, BM, layout=ROW)
        if FUSE_Q:  # the first K / Vᵀ tiles are in flight: quantize this program's Q rows meanwhile
            if not PDL:
                q_scale = _quantize_q_rows(QRAW, q_smem, bh, first, S, TINY, BM, D)
            if SAVE_Q:  # the backward's Q bytes; a forward nothing differentiates skips them
                _save_q_rows(QS, q_desc, q_smem, q_scale, bh, first, S)
            qs = gl.convert_layout(q_scale, ROW) * qk_scale
        else:
            qs = gl.load(QS + bh.to(gl.int64) * S + offs_m) * qk_scale
            mbarrier.wait(q_bar, 0)
        m_i = gl.full([BM], float("-inf"), gl.float32, ROW)
        l_i = gl.zeros([BM], gl.float32, ROW)
        acc = gl.zeros([BM, D], gl.float32, L)
        zero = gl.zeros([BM, BLOCK], gl.float32, L)
        cv = 1.0

        if PIPE == 3:  # one accumulator chained through the P·V products (`attention_fwd`'s CHAIN): no
            # fresh [BM, D] product tile, so ~64 registers fewer and three programs per SM (maxnreg).
            # The tile's two block scales are loaded a tile ahead: loaded where they are used, each tile's softmax
            # waited for an L2 round trip (Nsight Compute's long scoreboard, 0.62 of the kernel's 6.22 cycles an
            # instruction); −1.8% at 8k
            kbs_next = gl.load(KBS + kvb_off)
            vsb_next = gl.load(VBS + kvb_off)
            for t in range(0, n_off):
                stage = t % STAGES
                kbs = kbs_next
                vsb = vsb_next
                kbs_next = gl.load(KBS + kvb_off + t + 1)  # t + 1 <= n_off: the diagonal block at most
                vsb_next = gl.load(VBS + kvb_off + t + 1)
                mbarrier.wait(ready.index(stage), (t // STAGES) & 1)
                s = warpgroup_mma(q_smem, k_smem.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True)
                if REFILL_UNDER_QK:  # the previous tile's stage, free since its P·V retired, refilled under QKᵀ(t)
                    if t >= 1 and t - 1 + STAGES <= n_off:
                        _issue_tile(t - 1 + STAGES, n_off, kv_row, v_row, kb_desc, vbt_desc, k_desc, vt_desc,
                                    k_smem, v_smem, ready, STAGES, BLOCK)
                s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
                p, m_i, l_i, alpha = _off_softmax(s, qs, m_i, l_i, kbs)
                p8 = _p_operand(p, P_L, P_ORDER)
                acc = acc * (alpha * (cv / vsb))[:, None]
                acc = warpgroup_mma(p8, v_smem.index(stage).permute((1, 0)), acc, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
                cv = vsb
                if not REFILL_UNDER_QK and t + STAGES <= n_off:
                    _issue_tile(t + STAGES, n_off, kv_row, v_row, kb_desc, vbt_desc, k_desc, vt_desc, k_smem,
                                v_smem, ready, STAGES, BLOCK)
            stage = n_off % STAGES  # the diagonal tile's scores: below, whole or half
            mbarrier.wait(ready.index(stage), (n_off // STAGES) & 1)
        elif PIPE == 2:  # QKᵀ(t + 1) in flight during the softmax of tile t (the diagonal tile's included)
            mbarrier.wait(ready.index(0), 0)
            s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), zero, use_acc=False, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
            for t in range(0, n_off):
                stage = t % STAGES
                nxt = (t + 1) % STAGES
                mbarrier.wait(ready.index(nxt), ((t + 1) // STAGES) & 1)
                s_next = warpgroup_mma(q_smem, k_smem.index(nxt).permute((1, 0)), zero, use_acc=False, is_async=True)
                p, m_i, l_i, alpha = _off_softmax(s, qs, m_i, l_i, gl.load(KBS + kvb_off + t))
                vsb = gl.load(VBS + kvb_off + t)
                p8 = _p_operand(p, P_L, P_ORDER)
                pv = warpgroup_mma(p8, v_smem.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True)
                s, pv = warpgroup_mma_wait(num_outstanding=0, deps=(s_next, pv))
                acc = acc * (alpha * (cv / vsb))[:, None] + pv  # `_fwd_off_tile`'s carry
                cv = vsb
                if t + STAGES <= n_off:  # stage t is free: both products reading it have retired
                    _issue_tile(t + STAGES, n_off, kv_row, v_row, kb_desc, vbt_desc, k_desc, vt_desc, k_smem,
                                v_smem, ready, STAGES, BLOCK)
            stage = n_off % STAGES  # s: the diagonal tile's scores, already computed
        else:
            if n_off > 0:  # tile 0's scores and softmax; its P·V is issued with tile 1's scores
                mbarrier.wait(ready.index(0), 0)
                s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), zero, use_acc=False, is_async=True)
                s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
                p, m_i, l_i, alpha_prev = _off_softmax(s, qs, m_i, l_i, gl.load(KBS + kvb_off))
                vsb_prev = gl.load(VBS + kvb_off)
                for t in range(1, n_off):
                    stage = t % STAGES
                    prev = (t - 1) % STAGES
                    mbarrier.wait(ready.index(stage), (t // STAGES) & 1)
                    # P(t - 1) crosses the loop in fp32: an 8-bit register operand carried by the loop is
                    # unpacked to a byte per register and repacked at its use (+224 SASS instructions a tile)
                    p8 = _p_operand(p, P_L, P_ORDER)
                    s = warpgroup_mma(q_smem, k_smem.index(stage).permute((1, 0)), zero, use_acc=False,
                                      is_async=True)
                    pv = warpgroup_mma(p8, v_smem.index(prev).permute((1, 0)), zero, use_acc=False, is_async=True)
                    kbs = gl.load(KBS + kvb_off + t)
                    if PIPE == 1:  # the softmax of tile t runs while P·V(t - 1) is in flight
                        s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))
                        p, m_new, l_i, alpha = _off_softmax(s, qs, m_i, l_i, kbs)
                        pv = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
                        acc = acc * (alpha_prev * (cv / vsb_prev))[:, None] + pv  # the carry, a tile late
                    else:  # both products back to back on the tensor cores, then the softmax
                        s, pv = warpgroup_mma_wait(num_outstanding=0, deps=(s, pv))
                        acc = acc * (alpha_prev * (cv / vsb_prev))[:, None] + pv
                        p, m_new, l_i, alpha = _off_softmax(s, qs, m_i, l_i, kbs)
                    m_i = m_new
                    cv = vsb_prev
                    if t - 1 + STAGES <= n_off:  # stage prev is free: both products reading it have retired
                        _issue_tile(t - 1 + STAGES, n_off, kv_row, v_row, kb_desc, vbt_desc, k_desc, vt_desc,
                                    k_smem, v_smem, ready, STAGES, BLOCK)
                    alpha_prev = alpha
                    vsb_prev = gl.load(VBS + kvb_off + t)
                last = (n_off - 1) % STAGES
                p8 = _p_operand(p, P_L, P_ORDER)
                pv = warpgroup_mma(p8, v_smem.index(last).permute((1, 0)), zero, use_acc=False, is_async=True)
                pv = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
                acc = acc * (alpha_prev * (cv / vsb_prev))[:, None] + pv
                cv = vsb_prev
            stage = n_off % STAGES
            mbarrier.wait(ready.index(stage), (n_off // STAGES) & 1)
            s = warpgroup_mma(q_smem, k_smem.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        acc = acc * cv  # true units for the per-token diagonal product
        if PIN_RESCALE:
            acc = _kept_here(acc)

        # the diagonal tile: per-token K and V, the causal mask, V's scale folded into P (r_i). In the chained variant
        # with HALF_DIAG, rows that start their key block see only its first half (`half_diag_applies`)
        if PIPE == 3 and HALF_DIAG and SAFE and first % BLOCK == 0:
            acc, m_i, l_i = _half_diag_tile(acc, m_i, l_i, q_smem, k_smem.index(stage), v_smem.index(stage), qs, KS,
                                            VS, bhk, S, diag, offs_m, BM, BLOCK, NW, SAFE)
        else:
            if PIPE == 3:  # its scores: the other variants computed them with their loop
                s = warpgroup_mma(q_smem, k_smem.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True)
                s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
            acc, m_i, l_i = _diag_tile(acc, m_i, l_i, s, v_smem.index(stage), zero, qs, KS, VS, bhk, S, diag, offs_m,
                                       P_L, BLOCK, SAFE)

        for i in gl.static_range(STAGES):
            mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(q_bar)
        if FUSE_Q and SAVE_Q:
            tma.store_wait(0)  # Q's bytes leave shared memory before the program ends

        o = _finish_rows(acc, m_i, l_i, LSE2, MOFF, bh, S, offs_m)
        if TMA_OUT:  # every product has retired, so the ring's first K stage (16 KB) holds O's bf16 rows and Q's
            # tile (8 KB) O's bytes
            _store_o_by_tma(o, k_smem.index(0)._reinterpret(gl.bfloat16, [BM, D], o_desc.layout), q_smem, o_desc,
                            o8_desc, OS, bh, S, first, offs_m, SAVE_O8, TINY)
        else:
            offs_d = gl.arange(0, D, layout=COL)
            rows = (bh.to(gl.int64) * S + offs_m.to(gl.int64))[:, None] * D + offs_d[None, :]
            gl.store(O + rows, o)
            if SAVE_O8:
                v, os, finite = _fp8_row_quotients(o.to(gl.float32), TINY)
                gl.store(OS + bh.to(gl.int64) * S + offs_m, os)
                if finite:  # the stores inside the branches: joining the bytes would unpack them (`_e4m3_bytes`)
                    gl.store(O8 + rows, v.to(gl.float8e4nv).to(gl.uint8, bitcast=True))
                else:
                    gl.store(O8 + rows, _e4m3_bytes(v))


# launched through `relaunch.Relaunch`: Triton's launch path once per plan, the compiled launcher after that
_FWD_LAUNCH = Relaunch(_fwd_gluon_kernel) if HAS_GLUON else None


def _registers(pipe: int) -> dict:
    """The chained variant (pipe 3) fits 168 registers a thread: three programs of 4 warps per SM."""
    return {"maxnreg": MAXNREG_CHAIN} if pipe == 3 else {}


def _fp8_layout(block_shape):
    return nvmma_layout(tuple(block_shape), gl.float8e4nv)


def descriptors(q, k, v):
    """TMA descriptors over 2-D views: Q8 [B·Hq·S, D] in [BM, D] tiles, K8 and its token-block copy
    [B·Hkv·S, D] in [BLOCK, D] tiles, Vᵀ and its copy [B·Hkv·D, S] in [D, BLOCK] tiles (K-major: D is
    the P·V product's N, the keys its contraction)."""
    d, seq = q.vals.shape[-1], q.vals.shape[-2]

    def rows(t, block):
        return TensorDescriptor.from_tensor(t.reshape(-1, d), block, _fp8_layout(block))

    def cols(t):
        return TensorDescriptor.from_tensor(t.reshape(-1, seq), [d, BLOCK], _fp8_layout([d, BLOCK]))

    return (rows(q.vals, [BM, d]), rows(k.off.vals, [BLOCK, d]), cols(v.off.vals),
            rows(k.vals, [BLOCK, d]), cols(v.vals_t))


def out_descriptors(o: torch.Tensor, o8: torch.Tensor | None, q_vals: torch.Tensor):
    """TMA descriptors of the outputs (TMA_OUT): O bf16 [B·Hq·S, D] and O's fp8 bytes in [BM, D] tiles; without
    O8, Q's bytes stand in (a descriptor of the kernel's type, never written)."""
    d = o.shape[-1]
    o_desc = TensorDescriptor.from_tensor(o.reshape(-1, d), [BM, d],
                                          nvmma_layout((BM, d), gl.bfloat16))
    o8_desc = TensorDescriptor.from_tensor((q_vals if o8 is None else o8).reshape(-1, d), [BM, d],
                                           _fp8_layout([BM, d]))
    return o_desc, o8_desc


# Gluon kernels are launched eagerly: torch.compile's support for user Triton kernels covers
# tl-JIT functions, not Gluon's TMA-descriptor launches (never exercised here), so Dynamo
# breaks the graph at this call instead of tracing it.
@torch.compiler.disable
def forward(q, k, v, safeguards: bool, sm_scale: float, save_o8: bool, pipe: int = PIPE, stages: int | None = None,
            q_raw: torch.Tensor | None = None, refill_under_qk: bool | None = None, head_chunk: int | None = None,
            pdl: bool | None = None, save_q: bool = True, half_diag: bool | None = None):
    """`attention_fwd.forward` for the cases `eligible` accepts; the same outputs. pipe: what the
    softmax of tile t overlaps within the program: 2 QKᵀ(t + 1), 1 P·V(t - 1), 0 nothing (both products
    waited for before it); stages: K / Vᵀ tiles in the shared-memory ring (2 or 3: two programs per SM).
    q_raw: bf16 Q [B, Hq, S, D] (contiguous, checked by the caller) with q the empty operand of
    `attention_fwd.fused_q_operand`, which the kernel fills with the pre-pass's bytes and scales.
    refill_under_qk: the chained variant's ring refill order (`REFILL_UNDER_QK` where None).
    head_chunk: the programs' launch order (`launch_order`; `HEAD_CHUNK` where None). pdl: a programmatic dependent
    launch (`PDL` where None). With q_raw the caller guarantees that q_raw was written before the kernel launched just
    before this one (the key-sides pass) started: the kernel reads it before it waits.
    save_q (with q_raw): q's bytes and scales written for the backward; False leaves them unwritten (a forward
    nothing will differentiate). half_diag: `HALF_DIAG` where None (the chained variant only)."""
    if pipe not in (0, 1, 2, 3):
        raise ValueError(f"gluon forward pipe={pipe}: allowed 0, 1, 2, 3")
    consts = constexprs(safeguards, save_o8=save_o8, fuse_q=q_raw is not None, pipe=pipe, stages=stages,
                        p_order=v.off.p_order, refill_under_qk=refill_under_qk, head_chunk=head_chunk, pdl=pdl,
                        save_q=save_q, half_diag=half_diag)
    head_chunk = consts["HEAD_CHUNK"]
    if not isinstance(head_chunk, int) or head_chunk < 0:
        raise ValueError(f"gluon forward head_chunk={head_chunk!r}: allowed 0 (head after head) or a group size >= 1")
    if consts["STAGES"] not in (2, 3):
        raise ValueError(f"gluon forward stages={consts['STAGES']}: allowed 2 or 3 (two programs of 64 rows per SM)")
    b, hq, seq, d = q.vals.shape
    hkv = k.vals.shape[1]
    o = torch.empty(b, hq, seq, d, dtype=torch.bfloat16, device=q.vals.device)
    # the row statistics (and O's fp8 copy) live and die together (saved for the backward, or dropped): one
    # allocation (`buffers.carve`)
    rows = (b, hq, seq)
    if save_o8:
        lse2, moff, o8, o_scale = carve(o.device, [(rows, torch.float32), (rows, torch.int8),
                                                   ((*rows, d), torch.uint8), (rows, torch.float32)])
    else:
        lse2, moff = carve(o.device, [(rows, torch.float32), (rows, torch.int8)])
        o8, o_scale = o, lse2  # unread without SAVE_O8
    _FWD_LAUNCH(
        (seq // BM, b * hq),
        (*descriptors(q, k, v), *out_descriptors(o, o8.view(torch.float8_e4m3fn) if save_o8 else None, q.vals),
         q.vals if q_raw is None else q_raw, q.scale, k.scale, k.off.scale, v.scale,
         v.off.scale, o, o8, o_scale, lse2, moff, sm_scale * 1.4426950408889634, seq, hq // hkv),
        consts,
        dict(num_warps=BM // 16, **_registers(pipe), **({"launch_pdl": True} if consts["PDL"] else {})),
    )
    if not save_o8:
        return o, lse2, moff, None, None
    return o, lse2, moff, o8.view(torch.float8_e4m3fn), o_scale
