"""Compile-only probe: does FA3's forward schedule fit sm_90 in Gluon (Triton 3.6), and at how many registers?

    python scripts/ws_forward_probe.py                  # consumers at 240 registers, producer at 24
    python scripts/ws_forward_probe.py --consumer-regs 232

Why: the fp8 forward's three independent 64-row programs per SM overlap their products and softmax far less than
they could (docs/kernels.md, open item 1), and what enforces the overlap is FA3's schedule: one program per SM with
a one-warp TMA producer (`gl.warp_specialize`, its registers lowered by `setmaxnreg`) and two consumer
warpgroups of 64 rows, each with its next QKᵀ in flight during its softmax and its P·V chained into one
accumulator. That needs ~240 registers a consumer thread (O, S(t) and S(t + 1) are 64 each), which only a
producer at 24 leaves room for. This compiles that loop shape for sm_90 on a machine without a GPU
(`kernel_registers.py`'s way) and prints ptxas's report: registers, spills, whether the wgmma were serialized
(C7514), the `setmaxnreg` values and the wgmma count. It is the loop's shape only, not a forward: no causal
diagonal, no block scales, no fused Q or O8 epilogue, no ping-pong barrier between the consumers; the kernel
that follows from it is to be measured on the GPU against `attention_fwd_gluon`. Never imported by the package.
"""
from __future__ import annotations

import argparse
import os
import re

os.environ.pop("TRITON_INTERPRET", None)  # Gluon compiles for a GPU target only; before triton is imported

from kernel_registers import compile_gluon, ptxas_report  # noqa: E402  (scripts/ is this script's first sys.path entry)
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

BM, BN, D, STAGES = 64, 128, 128, 2  # rows per consumer, keys per tile, head dim, ring stages


@gluon.jit
def producer(k_desc, vt_desc, k_smem, v_smem, ready, empty, n, STAGES: gl.constexpr, BN: gl.constexpr):
    """One warp: K's and Vᵀ's tiles into the ring, each stage once both consumers released it."""
    for t in range(n):
        s = t % STAGES
        mbarrier.wait(empty.index(s), ((t // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(s), k_desc.block_type.nbytes + vt_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [t * BN, 0], ready.index(s), k_smem.index(s))
        tma.async_copy_global_to_shared(vt_desc, [0, t * BN], ready.index(s), v_smem.index(s))

@gluon.jit
def consumer(q_smem, k_smem, v_smem, ready, empty, n, OUT, row0, STAGES: gl.constexpr, BM: gl.constexpr,
             BN: gl.constexpr, D: gl.constexpr):
    """A warpgroup's 64 rows: S(t + 1) issued before the softmax of tile t, P·V chained into O."""
    L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 32])
    P_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=L, k_width=4)
    ROW: gl.constexpr = gl.SliceLayout(1, L)
    zero = gl.zeros([BM, BN], gl.float32, L)
    acc = gl.zeros([BM, D], gl.float32, L)
    m_i = gl.full([BM], -1e30, gl.float32, ROW)
    l_i = gl.zeros([BM], gl.float32, ROW)
    mbarrier.wait(ready.index(0), 0)
    s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    for t in range(n - 1):
        st = t % STAGES
        nx = (t + 1) % STAGES
        mbarrier.wait(ready.index(nx), ((t + 1) // STAGES) & 1)
        s_next = warpgroup_mma(q_smem, k_smem.index(nx).permute((1, 0)), zero, use_acc=False, is_async=True)
        m_new = gl.maximum(m_i, gl.max(s, 1))
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + gl.sum(p, 1)
        m_i = m_new
        acc = acc * alpha[:, None]
        acc = warpgroup_mma(gl.convert_layout(p.to(gl.float8e4nv), P_L), v_smem.index(st).permute((1, 0)), acc,
                            is_async=True)
        s, acc = warpgroup_mma_wait(num_outstanding=0, deps=(s_next, acc))
        mbarrier.arrive(empty.index(st), count=1)
    rows = row0 + gl.arange(0, BM, layout=ROW)
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, L))
    gl.store(OUT + rows[:, None] * D + cols[None, :], acc / l_i[:, None])

@gluon.jit
def second_consumer(q_smem, k_smem, v_smem, ready, empty, n, OUT, STAGES: gl.constexpr, BM: gl.constexpr,
                    BN: gl.constexpr, D: gl.constexpr):
    consumer(q_smem.index(1), k_smem, v_smem, ready, empty, n, OUT, BM, STAGES, BM, BN, D)

@gluon.jit
def probe(q_desc, k_desc, vt_desc, OUT, n, STAGES: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
          D: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [2, BM, D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BN, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(vt_desc.dtype, [STAGES, D, BN], vt_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # both consumers release a stage
    gl.warp_specialize([(consumer, (q_smem.index(0), k_smem, v_smem, ready, empty, n, OUT, 0, STAGES, BM, BN, D)),
                        (second_consumer, (q_smem, k_smem, v_smem, ready, empty, n, OUT, STAGES, BM, BN, D)),
                        (producer, (k_desc, vt_desc, k_smem, v_smem, ready, empty, n, STAGES, BN))],
                       [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


def compile_probe(consumer_regs: int = 240, producer_regs: int = 24) -> dict:
    """ptxas's report of the probe for sm_90a, with the `setmaxnreg` values of its PTX and its wgmma count."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    f8 = torch.float8_e4m3fn
    desc = lambda t, box: TensorDescriptor.from_tensor(  # noqa: E731
        t, box, gl.NVMMASharedLayout.get_default_for(box, gl.float8e4nv))
    descs = [desc(torch.empty(BM, D, dtype=f8), [BM, D]), desc(torch.empty(4 * BN, D, dtype=f8), [BN, D]),
             desc(torch.empty(D, 4 * BN, dtype=f8), [D, BN])]  # Q, K, Vᵀ
    consts = dict(STAGES=STAGES, BM=BM, BN=BN, D=D, CONSUMER_REGS=consumer_regs, PRODUCER_REGS=producer_regs)
    compiled = compile_gluon(probe, descs, ["*fp32", "i32"], consts, {"num_warps": 4})
    ptx = compiled.asm["ptx"]
    # every partition's register moves, in PTX order (the producer's `dec` to PRODUCER_REGS among them)
    moves = [f"{op} {n}" for op, n in re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)]
    return {**ptxas_report(ptx), "setmaxnreg": moves,
            "wgmma": len(re.findall(r"wgmma\.mma_async", ptx)), "warps": compiled.metadata.num_warps,
            "shared_bytes": compiled.metadata.shared}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--consumer-regs", type=int, default=240)
    ap.add_argument("--producer-regs", type=int, default=24)
    args = ap.parse_args()
    report = compile_probe(args.consumer_regs, args.producer_regs)
    for key, value in report.items():
        print(f"{key:14} {value}")


if __name__ == "__main__":
    main()
