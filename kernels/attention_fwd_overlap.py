"""The forward's key-side pass of later head groups, run under the forward kernel of earlier ones.

Why: the pass that quantizes K and V for the forward (`quantize.fill_key_sides`: K's and Vᵀ's per-token bytes
and their token-block copies) is bound by DRAM (196 µs at S = 8k, B×H = 64 on an H100, 13% of the forward),
while the forward kernel is bound by its SMs (tensor cores and exponentials) and moves little through DRAM.
Run one after the other, the pass's time adds to the kernel's; run beside it, it can hide under it.

How: the B·Hkv slices of K and V are split into `chunks` groups of whole K/V heads (with their query heads).
Group 0's pass runs first on the whole GPU, as usual. The passes of groups 1, 2, ... follow on a side stream
of high priority, each as a persistent grid of `programs` programs: a few SMs' worth that the block scheduler
hands out first whenever a slot frees, so they stream K and V while the forward kernel of group 0 holds the
rest. Each group's forward kernel waits for its own pass only. The forward launches alternate between the
caller's stream and a second one, so that group g + 1's programs fill the tail of group g's.

Every byte is the one-launch path's: the same kernels over the same inputs, only their launches split by
heads (`fill_key_sides(slices=)`, `attention_fwd.forward(heads=)`), and each head's outputs are written by
exactly one launch. Off by default (`CHUNKS`); the launch options "overlap" (chunks) and "overlap_programs"
choose it per call for A/B timings. On a CPU (the interpreter) the same launches run in order.
"""
from __future__ import annotations

import torch

from . import attention_fwd, attention_fwd_gluon, attention_fwd_ws, quantize
from .attention_operands import ForwardOperands, _key_side_operand

# groups of heads a forward is split into (0 or 1: the one-launch path); not yet timed on a GPU
CHUNKS = 0
# programs of each later group's persistent pass: enough to finish it under the previous group's forward kernel
# (at 8k a token block takes a pass program ~4 µs, a group's forward ~1.3 ms / CHUNKS), few enough that the forward
# keeps most of its ~400 program slots (132 SMs × 3)
PROGRAMS = 32

_STREAMS: dict = {}


def plan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec, has_doc: bool, fuse_q: bool,
         block: int) -> tuple[int, int] | None:
    """(chunks, programs) where this forward splits, else None: the launch options "overlap" /
    "overlap_programs" over `CHUNKS` / `PROGRAMS`, where the forward's joint key-sides launch (fp8 K and V of one
    shape with their token-block copies: no document masking) and the kernel's own quantization of Q
    (`attention_fwd.fuses_q`) apply, and K and V have at least two slices to split."""
    config = attention_fwd.launch_config(q.shape[-1], spec.emulated)
    chunks = int(config.get("overlap", CHUNKS) or 0)
    programs = int(config.get("overlap_programs", PROGRAMS))
    if chunks < 0 or programs < 1:
        raise ValueError(f"launch options overlap={chunks}, overlap_programs={programs}: allowed overlap >= 0 "
                         "(0 or 1: no split) and overlap_programs >= 1")
    if (chunks <= 1 or not fuse_q or has_doc or not spec.qk == spec.pv == "fp8" or k.shape != v.shape
            or not quantize.key_sides_in_one_launch(k, block)):
        return None
    if config.get("gluon") and config.get("pipe", attention_fwd_gluon.PIPE) == attention_fwd_ws.PIPE:
        return None  # the warp-specialized kernel runs every head in one launch
    n_slices = k.numel() // (k.shape[-2] * k.shape[-1])
    return (min(chunks, n_slices), programs) if n_slices > 1 else None


def slice_groups(n_slices: int, chunks: int) -> list[tuple[int, int]]:
    """`chunks` ranges [a, b) covering 0 .. n_slices in order, as even as whole slices allow."""
    if not 1 <= chunks <= n_slices:
        raise ValueError(f"overlap chunks={chunks}: allowed 1 .. {n_slices} (the B·Hkv slices of K and V)")
    bounds = [n_slices * i // chunks for i in range(chunks + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _side_streams(device: torch.device) -> tuple:
    """(the passes' stream of highest priority, the second forward stream), made once per device."""
    if device not in _STREAMS:
        high = torch.cuda.Stream.priority_range()[1]  # numerically lowest: the highest priority
        _STREAMS[device] = (torch.cuda.Stream(device, priority=high), torch.cuda.Stream(device))
    return _STREAMS[device]


def forward(q_raw: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec, causal: bool, safeguards: bool,
            sm_scale: float, block: int, save_o8: bool, chunks: int, programs: int, p_order: bool):
    """The key-side pass and the forward kernel of `attention.py`'s fast path (fp8 K and Vᵀ with token-block
    copies, Q quantized by the kernel), split into `chunks` groups of heads as the module docstring describes.
    Returns (ForwardOperands with Q's, K's and V's bytes, (o, lse2, moff, o8, o_scale)) as `prepare_forward`
    and `attention_fwd.forward` would."""
    k, v = k.contiguous(), v.contiguous()
    group = q_raw.shape[1] // k.shape[1]
    k_outs, v_outs = quantize.key_sides_outputs(k, block)
    ops = ForwardOperands(attention_fwd.fused_q_operand(q_raw), _key_side_operand(*k_outs, block, False),
                          _key_side_operand(*v_outs, block, True, p_order))
    outs = attention_fwd_gluon.forward_outputs(ops.q.vals, save_o8)
    groups = slice_groups(k.numel() // (k.shape[-2] * k.shape[-1]), chunks)

    def fill(slices, persistent):
        quantize.fill_key_sides(k, v, k_outs, v_outs, block, slices=slices, programs=programs if persistent else None,
                                p_order=p_order)

    def run(slices):
        return attention_fwd.forward(ops.q, ops.k, ops.v, spec, causal, safeguards, sm_scale, block, save_o8,
                                     q_raw=q_raw, heads=(slices[0] * group, slices[1] * group), outs=outs)

    fill(groups[0], persistent=False)
    if not q_raw.is_cuda:  # the interpreter: the same launches in order
        for i, slices in enumerate(groups):
            if i:
                fill(slices, persistent=True)
            result = run(slices)
        return ops, result
    main = torch.cuda.current_stream(q_raw.device)
    passes, other = _side_streams(q_raw.device)
    passes.wait_stream(main)  # the inputs and every output were made on the caller's stream
    other.wait_stream(main)
    done = []
    with torch.cuda.stream(passes):
        for slices in groups[1:]:
            fill(slices, persistent=True)
            done.append(torch.cuda.Event())
            done[-1].record(passes)
    for i, slices in enumerate(groups):
        stream = main if i % 2 == 0 else other
        if i:
            stream.wait_event(done[i - 1])
        with torch.cuda.stream(stream):
            result = run(slices)
    main.wait_stream(other)
    main.wait_stream(passes)
    return ops, result
