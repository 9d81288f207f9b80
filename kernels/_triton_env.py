"""Where Triton kernels can run: compiled on CUDA, or under the interpreter on CPU; and where the
Gluon (Triton's Hopper layer) kernels of the fp8 fast path can: compiled on sm_90 only.

Triton decides between compiling and interpreting when a kernel is *defined*
(`@triton.jit` reads TRITON_INTERPRET at decoration time), so the answer is
frozen here at import, in step with the kernels defined after it. Under the interpreter
this also mends its run-time loop bounds for NumPy 2.4 (`_interpreter_loop_bounds`), here
because every kernel module imports this one first.
"""
from __future__ import annotations

import os
from functools import cache

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


def _interpreter_loop_bounds() -> None:
    """Let Triton 3.6's interpreter take run-time loop bounds under NumPy 2.4.

    The interpreter turns a bound such as ``range(0, pid * BLOCK, BLOCK)`` into an int with
    ``int(ndarray)`` on a one-element array, which NumPy 2.4 rejects; this wraps its tensor
    patching so ``__index__`` reads the one element instead. Interpreter only, idempotent.
    """
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "flamia_patched", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched.flamia_patched = True
    interpreter._patch_lang_tensor = patched


if HAS_TRITON and INTERPRET:  # here, where every kernel module looks first: before any kernel is defined or run
    _interpreter_loop_bounds()


def _has_gluon() -> bool:
    """Triton's Gluon with its Hopper module (TMA, asynchronous wgmma), outside the interpreter (which
    has no Gluon)."""
    if not HAS_TRITON or INTERPRET:
        return False
    try:
        import triton.experimental.gluon.language.nvidia.hopper  # noqa: F401
    except ImportError:
        return False
    return True


HAS_GLUON = _has_gluon()


@cache
def device_capability(index: int | None) -> tuple[int, int]:
    """torch.cuda.get_device_capability, once per device: asked on every call's dispatch, and it reads the
    device's properties each time (a few µs of host time the GPU can end up waiting through)."""
    return torch.cuda.get_device_capability(index)


def gluon_unavailable(x: torch.Tensor) -> str | None:
    """None when the sm_90 Gluon kernels can process `x`, else why not (callers then run the Triton
    kernels)."""
    if not HAS_GLUON:
        return "Triton without Gluon's Hopper module (or the interpreter)"
    if not x.is_cuda or device_capability(x.device.index) != (9, 0):
        return "not an sm_90 GPU"
    return None
