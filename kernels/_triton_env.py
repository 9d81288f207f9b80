"""Where Triton kernels can run: compiled on CUDA, or under the interpreter on CPU.

Triton decides between compiling and interpreting when a kernel is *defined*
(`@triton.jit` reads TRITON_INTERPRET at decoration time), so the answer is
frozen here at import, in step with the kernels defined after it.
"""
from __future__ import annotations

import os

import torch

try:
    import triton  # noqa: F401

    HAS_TRITON = True
except ImportError:  # e.g. macOS or Windows wheels of torch without triton
    HAS_TRITON = False


def _interpret_flag() -> bool:
    """TRITON_INTERPRET as Triton itself parses it (knobs), else the plain env var."""
    if not HAS_TRITON:
        return False
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):
        return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


INTERPRET = _interpret_flag()


def can_run_triton(x: torch.Tensor) -> bool:
    """True if a Triton kernel can process `x`: compiled on CUDA, or interpreted anywhere.

    A CPU tensor without TRITON_INTERPRET=1 cannot run a Triton kernel; callers
    then fall back to the PyTorch ground truth (same bytes).
    """
    return HAS_TRITON and (INTERPRET or x.is_cuda)
