"""Session 24's question before a dQ fused into the dK/dV kernel: what its two new costs are on a Hopper GPU.

1. `atomics`: dQ summed in fp32 by every key block's program — each adds a [64, BM] tile of dQᵀ (64 head-dim rows,
   BM queries) per query sub-tile into dQacc [B·H, D, S], from the layout a wgmma accumulator of that shape has
   (NVMMA, so two consecutive queries a thread: `atom.v2`), from a blocked layout of four consecutive queries a
   thread (`atom.v4`), as one TMA reduce-add of each [D, BM] tile from shared memory (FlashAttention-3's way;
   `_reduce_add`), and as plain stores of the same tiles (the traffic without the additions), for 64- and 128-key
   programs (17 / 8.6 GB of additions at S = 8k, B×H = 64). Prints TB/s of additions.
2. `ws128`: the warp-specialized dK/dV kernel (`attention_dkdv_ws`) with 128 keys per program (two consumer
   warpgroups sharing each query sub-tile, one program per SM at 240 registers) against its 64-key default: the
   kernel's time (torch.profiler, the dQ kernel on the caller's stream so that the dK/dV kernel runs alone) and dK / dV
   bit for bit (the same sums in the same order).

    python scripts/device/fused_dq_probe.py atomics
    python scripts/device/fused_dq_probe.py ws128
    python scripts/device/fused_dq_probe.py ptx    # on any machine: each way's global memory ops, compiled for sm_90
Never imported by the package.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: launch_configs


@gluon.jit
def _add_tiles(DQ, S, D: gl.constexpr, BN: gl.constexpr, BM: gl.constexpr, KIND: gl.constexpr):
    """Program (key block kb, head bh, half h of D): one [64, BM] tile for each query sub-tile from kb's first key
    to S, added into DQ [B·H·D, S] (KIND 0: NVMMA layout, 1: four queries a thread, 2: stored, not added)."""
    if KIND == 0:
        L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BM, 16])
    else:
        L: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 4], threads_per_warp=[32 // (BM // 4), BM // 4],
                                           warps_per_cta=[4, 1], order=[1, 0])
    kb = gl.program_id(0)
    bh = gl.program_id(1)
    h = gl.program_id(2)
    rows = h * 64 + gl.arange(0, 64, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, BM, layout=gl.SliceLayout(0, L))
    base = DQ + (bh.to(gl.int64) * D + rows.to(gl.int64))[:, None] * S + cols[None, :]
    x = gl.full([64, BM], 1.0, gl.float32, L)
    for q0 in range(kb * BN, S, BM):
        if KIND == 2:
            gl.store(base + q0, x)
        else:
            gl.atomic_add(base + q0, x, sem="relaxed")


@builtin
def _reduce_add(tensor_desc, coord, src, _semantic=None):
    """TMA reduce-add of shared-memory tile src into the descriptor's box at coord (cp.reduce.async.bulk.tensor
    ... .add): Gluon 3.6's builder has the op, its Hopper `tma` module no wrapper."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle)


@gluon.jit
def _reduce_tiles(dq_desc, S, D: gl.constexpr, BN: gl.constexpr, BM: gl.constexpr):
    """`_add_tiles`' additions as one TMA reduce-add of a [D, BM] tile per query sub-tile (FlashAttention-3's dQ
    accumulation), one reduce in flight behind the one issued."""
    L: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BM, 16])
    kb = gl.program_id(0)
    bh = gl.program_id(1)
    tile = gl.allocate_shared_memory(gl.float32, [D, BM], dq_desc.layout)
    tile.store(gl.full([D, BM], 1.0, gl.float32, L))
    fence_async_shared()
    gl.thread_barrier()
    for q0 in range(kb * BN, S, BM):
        _reduce_add(dq_desc, [bh * D, q0], tile)
        tma.store_wait(1)
    tma.store_wait(0)


def atomics(seq: int, bh: int, d: int = 128, bm: int = 32) -> None:
    dq = torch.zeros(bh * d, seq, device="cuda")
    desc = TensorDescriptor.from_tensor(dq, [d, bm], gl.NVMMASharedLayout.get_default_for([d, bm], gl.float32))
    for bn in (128, 64):
        for kind, name in ((0, "nvmma v2"), (1, "blocked v4"), (3, "tma reduce"), (2, "stores")):
            grid = (seq // bn, bh, d // 64)

            def launch(grid=grid, bn=bn, kind=kind):
                if kind == 3:
                    _reduce_tiles[grid[:2]](desc, seq, D=d, BN=bn, BM=bm, num_warps=4)
                else:
                    _add_tiles[grid](dq, seq, D=d, BN=bn, BM=bm, KIND=kind, num_warps=4)
            launch()
            torch.cuda.synchronize()
            ms = []
            for _ in range(5):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                launch()
                b.record()
                torch.cuda.synchronize()
                ms.append(a.elapsed_time(b))
            nbytes = 4 * d * bh * sum(seq - kb * bn for kb in range(seq // bn))
            best = sorted(ms)[len(ms) // 2]
            print(f"atomics bn={bn:3d} {name:10s}: {nbytes / 1e9:6.2f} GB in {best:7.3f} ms = "
                  f"{nbytes / best / 1e9:6.2f} TB/s")
    dq.zero_()
    _reduce_tiles[(seq // 128, bh)](desc, seq, D=d, BN=128, BM=bm, num_warps=4)
    want = torch.arange(seq, device="cuda") // 128 + 1  # query q: every key block up to its own adds 1
    print(f"tma reduce sums exact: {torch.equal(dq, want.float().expand_as(dq))}")


def ptx_ops() -> dict:
    """{way: the distinct global-memory ops of its kernel's PTX} for the additions of `atomics`, compiled for sm_90
    without a GPU (the vectorization the table's labels claim, and that the TMA reduce builtin compiles)."""
    import re

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    def compile_ops(kernel, sig: dict, consts: dict) -> list[str]:
        src = GluonASTSource(kernel, {**sig, **dict.fromkeys(consts, "constexpr")}, constexprs=consts,
                             attrs={(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]})
        ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
        return sorted(set(re.findall(r"\b((?:atom|red|st)\.global[\w.]*|cp\.reduce\.async\.bulk[\w.:]*)", ptx)))

    consts = {"D": 128, "BN": 128, "BM": 32}
    ops = {name: compile_ops(_add_tiles, {"DQ": "*fp32", "S": "i32"}, {**consts, "KIND": kind})
           for kind, name in ((0, "nvmma v2"), (1, "blocked v4"), (2, "stores"))}
    desc = TensorDescriptor.from_tensor(torch.empty(128, 1024), [128, 32],
                                        gl.NVMMASharedLayout.get_default_for([128, 32], gl.float32))
    ops["tma reduce"] = compile_ops(_reduce_tiles, {"dq_desc": mangle_type(desc), "S": "i32"}, consts)
    return ops


def ws128(seq: int, batch: int, heads: int) -> None:
    from flamia_kernels import attention_bwd_gluon as G
    from flamia_kernels import attention_dkdv_ws as W
    from flamia_kernels import flamia_attention
    from launch_configs import launch_overrides
    from torch.profiler import ProfilerActivity, profile

    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v, do = (torch.randn(batch, heads, seq, 128, device="cuda", generator=gen).to(torch.bfloat16)
                   for _ in range(4))

    def step():  # the dQ kernel on the caller's stream, so that the dK/dV kernel runs alone
        xs = [t.detach().requires_grad_(True) for t in (q, k, v)]
        with launch_overrides({"bwd": {"dq_stream": None}}):
            flamia_attention(*xs, spec="fp8").backward(do)
        return [x.grad for x in xs]

    results = {}
    for bn, maxnreg, stages in ((64, 128, 4), (128, 168, 6), (128, 168, 4), (64, 128, 4)):
        G.BN = W.BN = bn
        W.MAXNREG, W.STAGES = maxnreg, stages
        grads = step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        times = {name: sorted(e.time_range.elapsed_us() for e in prof.events() if name in e.name)
                 for name in ("_dkdv_ws_kernel", "_dq_gluon_kernel")}
        dkdv, dq = times["_dkdv_ws_kernel"], times["_dq_gluon_kernel"]
        label = f"bn={bn} maxnreg={maxnreg} stages={stages}"
        same = {n: torch.equal(a, b) for n, a, b in zip("qkv", grads, results.get("ref", grads), strict=True)}
        results.setdefault("ref", grads)
        print(f"ws dK/dV {label}: median {dkdv[len(dkdv) // 2]:.1f} µs (of {len(dkdv)}: "
              f"{', '.join(f'{t:.0f}' for t in dkdv)}); the dQ kernel's {dq[len(dq) // 2]:.1f}; grads bit-identical "
              f"to bn=64: {same}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("atomics", "ws128", "ptx"))
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    args = ap.parse_args()
    if args.what == "ptx":
        for way, ops in ptx_ops().items():
            print(f"{way}: {' '.join(ops)}")
    elif args.what == "atomics":
        atomics(args.seq, args.batch * args.heads)
    else:
        ws128(args.seq, args.batch, args.heads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
