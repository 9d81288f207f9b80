"""Several empty tensors carved from one allocation.

Why: a quantized attention call allocates a dozen outputs (bytes, scales, statistics), and each
`torch.empty` on CUDA costs ~7 µs of host time (H200 host, scripts/host_overhead_probe.py --parts) that the
GPU waits through at the start of a call. Outputs that live and die together (all saved for the backward,
or all dropped after the forward) share one allocation instead: the same bytes held, one call.
"""
from __future__ import annotations

import math

import torch

# each part starts on this boundary: TMA descriptors need 16-byte aligned bases, vector loads like 128 bytes
ALIGN = 256


def carve(device: torch.device, parts: list[tuple[tuple[int, ...], torch.dtype]]) -> list[torch.Tensor]:
    """Contiguous empty tensors of the given (shape, dtype)s, views of one byte buffer, each part starting
    on an ALIGN-byte boundary. Writing one never touches another; together they hold the buffer alive."""
    spans, total = [], 0
    for shape, dtype in parts:
        size = math.prod(shape) * dtype.itemsize
        spans.append((total, size, shape, dtype))
        total += -(-size // ALIGN) * ALIGN
    buf = torch.empty(max(total, 1), dtype=torch.uint8, device=device)
    typed = {dtype: buf.view(dtype) for _, _, _, dtype in spans}  # one reinterpretation per dtype, then
    # one as_strided per part: a slice and two views per part cost as much host time as the allocations saved
    return [typed[dtype].as_strided(shape, _contiguous_strides(shape), off // dtype.itemsize)
            for off, _, shape, dtype in spans]


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= int(s)
    return tuple(reversed(strides))

