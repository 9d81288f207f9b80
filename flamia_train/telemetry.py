"""Precision telemetry: the step's FLOPs split by format, honest MFU, and quantization statistics.

MFU of a quantized run is usually quoted against the bf16 peak, which flatters it, or
against the FP8 peak, which ignores the GEMMs left in bf16. Here every GEMM of the step is
counted at the rate of the unit it runs on, and the *weighted peak* is the rate the step
would reach if every GEMM ran at its unit's peak:

    weighted_peak = total_flops / Σ_f (flops_f / peak_f)

`mfu` stays against the bf16 peak (comparable across recipes); `mfu_weighted` is against
the weighted peak. MXFP8 and NVFP4 are emulated (exact numerics on bf16 tensor cores), so
they count at the bf16 rate; FP8 rowwise and blockwise run on FP8 tensor cores.

Every `interval` steps the quantized linears (`FlamiaLinear`) collect amax, saturation
and underflow per GEMM operand; they are logged per layer and op as
`quant/L<i>.<op>/<gemm>.<operand>.<stat>` (max of amax, mean of fractions over the op's
modules and over data-parallel ranks).
"""

from __future__ import annotations

from typing import Any

import torch

from flamia_train.metrics import peak_flops
from flamia_train.precision import LINEAR_OPS, Policy

RATE = {"bf16": "bf16", "fp8": "fp8", "fp8-block": "fp8", "mxfp8": "bf16", "nvfp4": "bf16"}  # unit a format runs on
BITS = {"bf16": 16, "fp8": 8, "fp8-block": 8, "mxfp8": 8, "nvfp4": 4}
_RATE_ORDER = {"bf16": 0, "fp8": 1}  # slower unit first

# Attention GEMMs per layer and the AttentionSpec operands each multiplies (forward, then backward).
ATTENTION_GEMMS = (("qk", "qk"), ("pv", "pv"), ("pv", "do"), ("do", "pv"), ("ds", "qk"), ("ds", "qk"))


def gemm_format(a: str, b: str) -> str:
    """The format a GEMM of operands in `a` and `b` counts as: the slower unit, then the wider format."""
    return min((a, b), key=lambda f: (_RATE_ORDER[RATE[f]], -BITS[f]))


def linear_shapes(model_cfg: Any) -> dict[str, int]:
    """Weight elements (in × out) per op of one layer, and of the LM head."""
    d, dh, ffn = model_cfg.d_model, model_cfg.head_dim, model_cfg.ffn_dim
    return {
        "qkv": d * (model_cfg.n_heads + 2 * model_cfg.n_kv_heads) * dh,
        "out": model_cfg.n_heads * dh * d,
        "mlp_up": 2 * d * ffn,
        "mlp_down": ffn * d,
        "lm_head": d * model_cfg.vocab_size,
    }


def flops_by_format(model_cfg: Any, policy: Policy, seq_len: int, flops_per_token: float) -> dict[str, float]:
    """Training FLOPs per token split by format; sums to `flops_per_token` (the rest, norms, is bf16).

    Each linear GEMM (fprop, dgrad, wgrad) costs 2·in·out per token; each of attention's six
    GEMMs (QKᵀ, PV forward; dV, dP, dQ, dK backward) costs H·Dh·S per token (causal half),
    matching GPT.flops_per_token.
    """
    shapes = linear_shapes(model_cfg)
    split: dict[str, float] = {}

    def add(fmt: str, flops: float) -> None:
        split[fmt] = split.get(fmt, 0.0) + flops

    attn = model_cfg.n_heads * model_cfg.head_dim * seq_len
    for i in range(policy.n_layers):
        spec = policy.attention[i]
        for a, b in ATTENTION_GEMMS:
            add(gemm_format(getattr(spec, a), getattr(spec, b)), attn)
        for op in LINEAR_OPS:
            for gemm in ("fprop", "dgrad", "wgrad"):
                add(getattr(policy.linears[i][op], gemm), 2 * shapes[op])
    for gemm in ("fprop", "dgrad", "wgrad"):
        add(getattr(policy.lm_head, gemm), 2 * shapes["lm_head"])
    add("bf16", max(0.0, flops_per_token - sum(split.values())))
    return split


def weighted_peak(split: dict[str, float], device: torch.device) -> float | None:
    """total / Σ flops_f / peak_f over formats; None where a needed peak is unknown (CPU)."""
    time_at_peak = 0.0
    for fmt, flops in split.items():
        peak = peak_flops(device, RATE[fmt])
        if peak is None:
            return None
        time_at_peak += flops / peak
    return sum(split.values()) / time_at_peak if time_at_peak else None


def _reduce(values: dict[str, float]) -> dict[str, float]:
    """Across data-parallel ranks: max of amax, mean of everything else (same keys on every rank)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return values
    keys = sorted(values)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    maxed = torch.tensor([values[k] if "amax" in k else 0.0 for k in keys], device=device, dtype=torch.float64)
    summed = torch.tensor([0.0 if "amax" in k else values[k] for k in keys], device=device, dtype=torch.float64)
    dist.all_reduce(maxed, op=dist.ReduceOp.MAX)
    dist.all_reduce(summed)
    world = dist.get_world_size()
    return {k: float(maxed[j]) if "amax" in k else float(summed[j]) / world for j, k in enumerate(keys)}


class PrecisionTelemetry:
    """Per-step precision metrics for the trainer: FLOP split, mfu / mfu_weighted, quant stats."""

    def __init__(self, model: Any, model_cfg: Any, seq_len: int, flops_per_token: float, device: torch.device,
                 interval: int = 0, world_size: int = 1):
        self.model, self.model_cfg, self.seq_len = model, model_cfg, seq_len
        self.flops_per_token, self.device, self.interval = flops_per_token, torch.device(device), interval
        self.world_size = world_size  # tokens/s is global, so peaks are of all ranks together
        bf16_peak = peak_flops(self.device, "bf16")
        self.bf16_peak = bf16_peak * world_size if bf16_peak else None
        self.split: dict[str, float] = {}
        self.peak: float | None = None
        self._collecting = False

    def set_policy(self, policy: Policy) -> None:
        """Recompute the FLOP split and weighted peak (at start-up and at each phase switch)."""
        self.split = flops_by_format(self.model_cfg, policy, self.seq_len, self.flops_per_token)
        peak = weighted_peak(self.split, self.device)
        self.peak = peak * self.world_size if peak else None

    def _modules(self):
        return self.model.linear_modules()

    def begin_step(self, step: int) -> None:
        """Turn statistics on for the step that will be `step + 1` when it is a telemetry step."""
        self._collecting = bool(self.interval) and (step + 1) % self.interval == 0
        if self._collecting:
            for _, _, module in self._modules():
                module.stats.reset()
                module.collect_stats = True

    def collect(self) -> dict[str, float]:
        """Aggregate every module's statistics per (layer, op), reset them and stop collecting."""
        groups: dict[str, list[float]] = {}
        for label, op, module in self._modules():
            for key, value in module.stats.summary().items():
                groups.setdefault(f"quant/{label}.{op}/{key}", []).append(float(value))
            module.stats.reset()
            module.collect_stats = False
        values = {k: max(v) if "amax" in k else sum(v) / len(v) for k, v in groups.items()}
        return _reduce(values)

    def end_step(self, step: int, tokens_per_s: float | None) -> dict[str, float | None]:
        total = sum(self.split.values()) or 1.0
        out: dict[str, float | None] = {f"flops_frac/{fmt}": f / total for fmt, f in sorted(self.split.items())}
        achieved = self.flops_per_token * tokens_per_s if tokens_per_s else None
        out["mfu"] = achieved / self.bf16_peak if achieved and self.bf16_peak else None
        out["mfu_weighted"] = achieved / self.peak if achieved and self.peak else None
        if self._collecting:
            out.update(self.collect())
            self._collecting = False
        return out
