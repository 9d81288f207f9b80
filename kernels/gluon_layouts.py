"""Shared-memory layouts of the Gluon kernels' TMA descriptors, built once per box shape and dtype.

Why: every Gluon launch passes a `TensorDescriptor` per operand (7 for the forward, 18 for a training
step's backward), and `NVMMASharedLayout.get_default_for` is pure Python (~5-9 µs a call) that ran for
each of them on every call, though a layout depends only on the box and the element type. The host time
of a call is GPU time lost where the GPU waits for it (scripts/host_overhead_probe.py).
"""
from __future__ import annotations

from functools import cache

from ._triton_env import HAS_GLUON

if HAS_GLUON:
    from triton.experimental.gluon import language as gl


@cache
def nvmma_layout(block_shape: tuple[int, ...], dtype) -> gl.NVMMASharedLayout:
    """`NVMMASharedLayout.get_default_for(block_shape, dtype)`, cached (layouts are frozen dataclasses)."""
    return gl.NVMMASharedLayout.get_default_for(list(block_shape), dtype)
