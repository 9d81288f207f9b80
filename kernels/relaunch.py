"""Launch a Triton / Gluon kernel again without `JITFunction.run`'s per-call work.

Why: an attention call launches its kernels from Python, and on the H200's host Triton's launch path costs
~100 µs a launch (scripts/host_overhead_probe.py --launch-costs: `JITFunction.run` 198-219 µs for the forward's
two launches), most of it the binder's per-argument specialization, repeated on every call although a
training run launches each kernel with the same kinds of arguments every step. A GPU that starts a call idle
waits through it (docs/benchmarks.md, session 18).

`Relaunch(kernel)(grid, args, constexprs, options)` launches `kernel[grid](*args, **constexprs, **options)`. The
first launch of each *plan* goes through Triton (compiling if needed) and keeps the `CompiledKernel` it returns;
later launches of the same plan call that kernel's launcher directly. The plan's key holds everything Triton's
specialization of these arguments depends on, and more (so a key never maps to a kernel compiled for other
arguments; at worst an equivalent call misses and takes Triton's path):

- a tensor: its dtype and whether its address is 16-byte aligned (Triton's pointer specialization);
- a Gluon TMA descriptor: its dtype, block shape, layout (by identity: `gluon_layouts` caches them) and padding
  (its type in the signature; shapes and strides are run-time arguments of the launcher);
- an int or bool: its type and value (Triton specializes ints equal to 1 and divisible by 16); a float: nothing;
- every constexpr and launch option by value, and the device.

What the fast path skips besides the binder: the check that the kernel's global variables kept the values it
was compiled with (module constants are passed as constexprs here, so they are in the key). Under the
interpreter every launch goes through Triton.
"""
from __future__ import annotations

import torch

from ._triton_env import HAS_TRITON, INTERPRET

if HAS_TRITON:
    from triton import knobs
    from triton.runtime import driver


def _arg_key(arg):
    """What Triton's specialization of one run-time argument depends on (see the module docstring)."""
    if isinstance(arg, torch.Tensor):
        return arg.dtype, arg.data_ptr() % 16 == 0
    if isinstance(arg, bool | int) or arg is None:
        return type(arg), arg  # True == 1, but Triton types a bool u1 and specializes the int 1 to a constant
    if isinstance(arg, float):
        return float
    base = getattr(arg, "base", None)
    if isinstance(base, torch.Tensor) and hasattr(arg, "block_shape"):  # a TMA descriptor
        return base.dtype, tuple(arg.block_shape), id(getattr(arg, "layout", None)), getattr(arg, "padding", None)
    raise TypeError(f"Relaunch: no plan key for an argument of type {type(arg).__name__}")


class Relaunch:
    """Launches of one kernel, each plan's `CompiledKernel` kept (module docstring)."""

    def __init__(self, kernel):
        self.kernel = kernel
        self._plans: dict = {}

    def __call__(self, grid: tuple[int, ...], args: tuple, constexprs: dict, options: dict | None = None) -> None:
        options = options or {}
        if INTERPRET or not HAS_TRITON:
            self.kernel[grid](*args, **constexprs, **options)
            return
        device = driver.active.get_current_device()
        key = (device, tuple(_arg_key(a) for a in args), tuple((n, type(v), v) for n, v in constexprs.items()),
               tuple(options.items()))
        plan = self._plans.get(key)
        if plan is None:
            compiled = self.kernel[grid](*args, **constexprs, **options)
            self._plans[key] = (compiled, self._tail(len(args), constexprs))
            return
        compiled, tail = plan
        full = (*args, *(constexprs[name] if name in constexprs else default for name, default in tail))
        stream = driver.active.get_current_stream(device)
        enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        meta = compiled.launch_metadata(grid, stream, *full) if enter is not None else None
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        compiled.run(grid[0], g1, g2, stream, compiled.function, compiled.packed_metadata, meta, enter, leave, *full)

    def _tail(self, given: int, constexprs: dict) -> tuple[tuple[str, object], ...]:
        """(name, default) of the kernel's parameters after the positional ones, in order: what the launcher
        takes after `args` (constexprs included: it skips them itself)."""
        params = self.kernel.params[given:]
        missing = [p.name for p in params if p.name not in constexprs and not p.has_default]
        if missing:
            name = getattr(self.kernel, "__name__", "a kernel")
            raise TypeError(f"Relaunch of {name}: no value for {', '.join(missing)}")
        return tuple((p.name, p.default if p.has_default else None) for p in params)

    def plans(self) -> int:
        """How many plans are kept (tests)."""
        return len(self._plans)
