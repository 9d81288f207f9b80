"""Quantized linear layers: `quantized_linear` (autograd op) and `FlamiaLinear` (an nn.Linear).

    from flamia_kernels.linear import LinearSpec, LINEAR_FORMATS, quantized_linear, FlamiaLinear, QuantStats
    y = quantized_linear(x, weight, LinearSpec.parse("fprop=fp8,dgrad=fp8,wgrad=bf16"))
    layer = FlamiaLinear(512, 2048, bias=False); layer.set_spec("nvfp4")

Each of the three GEMMs (fprop, dgrad, wgrad) runs in the format its `LinearSpec`
names; `linear_gemm` holds the per-format numerics and the path (``torch._scaled_mm``
for FP8 on sm_89+/sm_90, emulation elsewhere), docs/linear.md the semantics.

The weight is quantized inside the forward and again (the same deterministic rule) in
the backward, from the tensor the op receives: under FSDP2 that is the all-gathered
full weight, so sharding never changes a block's scale. Only X and W are saved for
the backward, as F.linear saves them.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import linear_gemm as G
from .hadamard import mix_seed
from .linear_quant import QuantStats
from .linear_spec import GEMMS, LINEAR_FORMATS, LinearSpec

__all__ = ["LINEAR_FORMATS", "GEMMS", "LinearSpec", "QuantStats", "quantized_linear", "FlamiaLinear",
           "set_quant_step"]


class _QuantizedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, spec: LinearSpec, stats: QuantStats | None, seed: int):
        x2 = x.reshape(-1, x.shape[-1])  # (T, in)
        if spec.fprop == "bf16":
            y = x2 @ weight.t()
        else:
            y = G.fprop(x2, weight, spec.fprop, stats)
        if bias is not None:
            y = y + bias
        ctx.save_for_backward(x, weight)
        ctx.cfg = (spec, stats, seed, bias is not None)
        # Not a view (aten.matmul folds batch dims the same way): FSDP2 warns on view outputs,
        # whose in-place use would drop its pre-backward hook.
        return torch.ops.aten._unsafe_view(y.contiguous(), (*x.shape[:-1], weight.shape[0]))

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        spec, stats, seed, has_bias = ctx.cfg
        dy = grad_y.reshape(-1, grad_y.shape[-1])  # (T, out)
        x2 = x.reshape(-1, x.shape[-1])  # (T, in)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            if spec.dgrad == "bf16":
                dx = dy @ weight.to(dy.dtype)
            else:
                dx = G.dgrad(dy, weight, spec.dgrad, stats, seed)
            dx = dx.reshape(x.shape).to(x.dtype)
        if ctx.needs_input_grad[1]:
            if spec.wgrad == "bf16":
                dw = (dy.t() @ x2.to(dy.dtype)).to(weight.dtype)
            else:
                dw = G.wgrad(dy, x2, spec.wgrad, weight.dtype, stats, seed)
        if has_bias and ctx.needs_input_grad[2]:
            db = dy.sum(0)
        return dx, dw, db, None, None, None


def check_inputs(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """Raise ValueError for shapes or devices the op cannot take, before any quantization."""
    if weight.dim() != 2:
        raise ValueError(f"quantized_linear: weight must be [out, in], got {tuple(weight.shape)}")
    if x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"quantized_linear: x [..., in] = {tuple(x.shape)} does not match weight [out, in] = "
            f"{tuple(weight.shape)}"
        )
    if x.device != weight.device:
        raise ValueError(f"quantized_linear: x is on {x.device} but weight is on {weight.device}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"quantized_linear: bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")


def quantized_linear(x: torch.Tensor, weight: torch.Tensor, spec: LinearSpec | str = "bf16",
                     bias: torch.Tensor | None = None, stats: QuantStats | None = None,
                     *, seed: int = 0) -> torch.Tensor:
    """``x·weightᵀ + bias`` with each GEMM in the format `spec` gives it; differentiable in all three.

    x [..., in] (bf16 / fp16 / fp32), weight [out, in], bias [out] or None. Returns
    [..., out] in x's dtype; dX in x's dtype, dW in weight's. `stats`: record amax,
    saturation and underflow of every quantized operand. `seed`: draws of nvfp4's
    stochastic rounding and Hadamard signs (derive it per step and layer, see FlamiaLinear).
    The all-bf16 spec is plain F.linear.
    """
    spec = LinearSpec.parse(spec)
    if spec.is_bf16:
        return F.linear(x, weight, bias)
    check_inputs(x, weight, bias)
    return _QuantizedLinear.apply(x, weight, bias, spec, stats, seed)


class FlamiaLinear(nn.Linear):
    """nn.Linear whose GEMMs run in the formats of `self.spec` (default bf16: plain F.linear).

    Attributes: `spec` (LinearSpec), `collect_stats` (record into `stats`), `stats`
    (QuantStats), `seed` (per-layer salt of the random draws; the model sets it to a
    layer id). The draws of one forward/backward depend on (seed, step, call): call
    counts forwards since the last `set_step`, so micro-batches differ and a resumed run
    that sets the step replays the same draws.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.spec = LinearSpec()
        self.collect_stats = False
        self.stats = QuantStats()
        self.seed = 0
        self._step = 0
        self._calls = 0

    def set_spec(self, spec: LinearSpec | str) -> None:
        """Switch formats (takes effect at the next forward; a run may switch mid-training)."""
        self.spec = LinearSpec.parse(spec)

    def set_step(self, step: int) -> None:
        """Key the next random draws to training step `step`."""
        self._step, self._calls = int(step), 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.spec.is_bf16:
            return F.linear(x, self.weight, self.bias)
        return self._quantized_forward(x)

    @torch.compiler.disable
    def _quantized_forward(self, x: torch.Tensor) -> torch.Tensor:
        # Outside torch.compile: the call counter is Python state that a graph would freeze
        # (or recompile on), and the emulated paths gain nothing from tracing.
        seed = mix_seed(self.seed, self._step, self._calls)
        self._calls += 1
        stats = self.stats if self.collect_stats else None
        return quantized_linear(x, self.weight, self.spec, self.bias, stats, seed=seed)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, spec={self.spec.name}"


def set_quant_step(module: nn.Module, step: int) -> None:
    """Call `set_step(step)` on every FlamiaLinear in `module` (the trainer, once per step)."""
    for m in module.modules():
        if isinstance(m, FlamiaLinear):
            m.set_step(step)
