"""Operand quantizers of the quantized linear GEMMs, and the telemetry they feed (`QuantStats`).

Every GEMM of a linear is computed as ``C = A·Bᵀ`` with A [M, K] and B [N, K], so each
operand is quantized along its *last* dim, the contraction dim of that GEMM:

    fprop  A = X   [T, in]    B = W   [out, in]
    dgrad  A = dY  [T, out]   B = Wᵀ  [in, out]
    wgrad  A = dYᵀ [out, T]   B = Xᵀ  [in, T]

A `Kind` names a scale-block shape (rows × cols, cols along K). Blocks are cut by
viewing the operand as groups ``[M/rows, K/cols, rows·cols]`` and handing each group to
the ground-truth quantizers in `formats` as one "token": one scale per group, the same
bytes `formats` produces. Dims that do not fill a block are zero-padded first (a zero
changes no amax and adds nothing to a product), so results carry the padded shape
and the GEMM slices its output.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import formats as FM
from . import linear_prepass as LP
from . import quantize as Q
from ._triton_env import can_run_triton


@dataclass(frozen=True)
class Kind:
    """A scale-block shape: `rows` × `cols` elements share a scale (cols along K; 0 = the whole row)."""

    fmt: str  # element format: "fp8" (E4M3 + fp32 scale), "mxfp8" (E4M3 + E8M0), "nvfp4"
    rows: int
    cols: int

    @property
    def is_2d(self) -> bool:
        """Blocks span rows too: the same quantized copy serves the transposed orientation."""
        return self.rows > 1


ROWWISE = Kind("fp8", 1, 0)  # one scale per row over all of K
FP8_1x128 = Kind("fp8", 1, 128)  # DeepSeek-V3 activation/gradient tiles
FP8_128x128 = Kind("fp8", 128, 128)  # DeepSeek-V3 weight blocks
MX_1x32 = Kind("mxfp8", 1, FM.MX_BLOCK)
NV_1x16 = Kind("nvfp4", 1, FM.NVFP4_BLOCK)
NV_16x16 = Kind("nvfp4", FM.NVFP4_BLOCK, FM.NVFP4_BLOCK)  # NVIDIA's 2-D weight blocks

# Largest magnitude a scaled element can take: saturation = an element quantized to it.
FORMAT_MAX = {"fp8": FM.FP8_MAX, "mxfp8": FM.FP8_MAX, "nvfp4": FM.E2M1_MAX}


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m if m > 1 else n


def _grouped(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """[M, K] -> [M/rows, K/cols, rows·cols]: each scale block becomes one last-dim group."""
    m, k = t.shape
    g = t.reshape(m // rows, rows, k // cols, cols).transpose(1, 2)  # (M/r, K/c, r, c)
    return g.reshape(m // rows, k // cols, rows * cols)


def _ungrouped(g: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of :func:`_grouped`."""
    mr, kc, _ = g.shape
    return g.reshape(mr, kc, rows, cols).transpose(1, 2).reshape(mr * rows, kc * cols)


@dataclass
class QOperand:
    """One quantized GEMM operand [Mp, Kp] (padded), in the forms the GEMM paths read.

    data, scale: E4M3 bytes and fp32 scales [Mp/rows, Kp/cols] (fp8 kinds; `torch._scaled_mm`).
    values: fp32 dequantized, bit-exact with `formats` (mxfp8; nvfp4 off CUDA).
    unit, post: nvfp4 on CUDA as ``values = unit · post``: unit = E2M1·E4M3 (exact in bf16),
    post = the fp32 global scale [Mp, 1] or [1, 1], applied after the product.
    """

    kind: Kind
    data: torch.Tensor | None = None
    scale: torch.Tensor | None = None
    values: torch.Tensor | None = None
    unit: torch.Tensor | None = None
    post: torch.Tensor | None = None

    def dense(self) -> torch.Tensor:
        """fp32 dequantized values [Mp, Kp] (fp8 kinds: ``bytes · scale``, as `formats` computes it)."""
        if self.values is not None:
            return self.values
        if self.data is None:
            return self.unit * self.post
        rows = self.data.shape[0] // self.scale.shape[0]
        cols = self.data.shape[1] // self.scale.shape[1]
        g = _grouped(self.data, rows, cols)  # (Mp/r, Kp/c, r·c)
        return _ungrouped(FM.dequantize_fp8(g, self.scale.unsqueeze(-1)), rows, cols)

    def t(self) -> QOperand:
        """The transposed operand; only 2-D block kinds (orientation-free scales) allow it."""
        if not self.kind.is_2d:
            raise ValueError(f"quantized operand of kind {self.kind} cannot be transposed: 1-D scales")

        def tr(x):
            return None if x is None else x.t()

        data = None if self.data is None else self.data.t().contiguous()
        return QOperand(self.kind, data, tr(self.scale), tr(self.values), tr(self.unit), self.post)


class QuantStats:
    """Per-GEMM-operand telemetry since the last `reset()`, kept on the device (no host sync).

    Keys name a GEMM and an operand: ``fprop.x``, ``fprop.w``, ``dgrad.dy``, ``dgrad.w``,
    ``wgrad.dy``, ``wgrad.x``. For each: amax (max |input| seen), saturation (fraction of
    elements quantized to the format's largest magnitude, clipped or exactly at it) and
    underflow (fraction of the non-zero inputs quantized to zero).
    """

    def __init__(self):
        self._acc: dict[str, torch.Tensor] = {}  # key -> [amax, saturated, underflowed, non-zero, numel]

    def record(self, key: str, x: torch.Tensor, q: torch.Tensor, fmt: str, numel: int) -> None:
        """Add one quantization: x the input and q the scaled codes (same shape), `numel` unpadded elements."""
        with torch.no_grad():
            x = x.float()
            nonzero = x != 0
            row = torch.stack((
                x.abs().amax(),
                (q.abs() >= FORMAT_MAX[fmt]).sum().float(),
                (nonzero & (q == 0)).sum().float(),
                nonzero.sum().float(),
                torch.tensor(float(numel), device=x.device),
            )).double()
            old = self._acc.get(key)
            if old is not None:
                row = torch.cat((torch.maximum(old[:1], row[:1]), old[1:] + row[1:]))
            self._acc[key] = row

    def reset(self) -> None:
        self._acc.clear()

    def keys(self) -> list[str]:
        return list(self._acc)

    def summary(self) -> dict[str, float]:
        """{"<gemm>.<operand>.amax" | ".saturation" | ".underflow": float} (one host sync)."""
        out: dict[str, float] = {}
        for key, row in self._acc.items():
            amax, sat, under, nonzero, numel = row.tolist()
            out[f"{key}.amax"] = amax
            out[f"{key}.saturation"] = sat / max(numel, 1.0)
            out[f"{key}.underflow"] = under / max(nonzero, 1.0)
        return out


def _quantize_groups(g, kind, want_split, stochastic, generator, row_global):
    """(QOperand fields dict, scaled codes q) for groups g [A, B, n] of one kind.

    MXFP8 and NVFP4 groups are quantized by the attention pre-pass's Triton kernels (`quantize`:
    one launch each, the same bytes as `formats` bit for bit, the same stochastic-rounding draws)
    wherever Triton runs on g, else by `formats` itself (`quantize` falls back on its own): the
    PyTorch quantizers dispatch ~200 ops per NVFP4 operand, which made the emulated recipes
    launch-bound on the GPU (scripts/count_linear_ops.py)."""
    if kind.fmt == "fp8":
        x8, scale = FM.quantize_fp8_per_token(g)
        return {"data": x8, "scale": scale}, x8.float()
    if kind.fmt == "mxfp8":
        x8, code = Q.quantize_mxfp8(g, block=g.shape[-1])
        return {"values": FM.dequantize_mxfp8(x8, code)}, x8.float()
    if row_global:  # one global scale per row of the [M, K] operand (rows == 1 here), found in the same pass
        flat = Q.quantize_nvfp4_per_token(g.flatten(1), block=g.shape[-1], stochastic=stochastic,
                                          generator=generator)
        glob = flat.global_scale.unsqueeze(-1)  # (M, 1, 1)
        qt = FM.NVFP4Tensor(flat.codes.reshape(*g.shape[:-1], -1), flat.block_scale.unsqueeze(-1), glob)
    else:
        glob = FM.nvfp4_global_scale(g.abs().amax()).reshape(1, 1, 1)
        qt = Q.quantize_nvfp4(g, block=g.shape[-1], global_scale=glob, stochastic=stochastic,
                              generator=generator)
    q = FM.e2m1_to_float(FM.unpack_nibbles(qt.codes))
    if want_split:
        return {"unit": q * qt.block_scale.float(), "post": glob.reshape(-1, 1)}, q
    return {"values": FM.dequantize_nvfp4(qt)}, q


def quantize_operand(
    t: torch.Tensor,
    kind: Kind,
    k_multiple: int,
    *,
    stochastic: bool = False,
    generator: torch.Generator | None = None,
    row_global: bool = False,
    want_split: bool = False,
    stats: QuantStats | None = None,
    key: str = "",
    transposed: bool = False,
) -> QOperand:
    """Quantize t [M, K] along K with `kind` blocks; K padded to `k_multiple`, M to `kind.rows`.

    stochastic/generator: nvfp4 stochastic rounding with `formats.nvfp4_noise` draws.
    row_global: nvfp4 global scale per row (causally safe for a token operand) instead of
    per tensor. want_split: nvfp4 as (unit, post) for the bf16 CUDA emulation instead of
    fp32 values. stats/key: record amax, saturation and underflow under `key`.
    transposed: return the transposed operand, ``quantize_operand(...).t()`` (2-D kinds only).

    FP8 kinds without stats run the fused Triton quantizer (`linear_prepass`: one launch, same
    bytes, row-major data) where Triton can run on t; everything else, and stats-recording
    calls, the PyTorch path below.
    """
    m, k = t.shape
    kp = _round_up(k, max(k_multiple, kind.cols))
    mp = _round_up(m, kind.rows)
    if kind.fmt == "fp8" and stats is None and can_run_triton(t) and LP.supported(t, kind.rows, kind.cols):
        if transposed and not kind.is_2d:
            raise ValueError(f"quantized operand of kind {kind} cannot be transposed: 1-D scales")
        data, scale = LP.quantize_fp8_operand(t, kind.rows, kind.cols, mp, kp, transposed=transposed)
        return QOperand(kind, data=data, scale=scale)
    out = _quantize_torch(t, kind, m, k, mp, kp, stochastic, generator, row_global, want_split, stats, key)
    return out.t() if transposed else out


def _quantize_torch(t, kind, m, k, mp, kp, stochastic, generator, row_global, want_split, stats, key) -> QOperand:
    """The PyTorch path of :func:`quantize_operand`: pad, group, `formats` quantizers, ungroup."""
    tp = F.pad(t.float(), (0, kp - k, 0, mp - m)) if (kp, mp) != (k, m) else t.float()
    cols = kind.cols or kp
    g = _grouped(tp, kind.rows, cols)
    parts, q = _quantize_groups(g, kind, want_split, stochastic, generator, row_global)
    if stats is not None:
        stats.record(key, g, q, kind.fmt, m * k)
    out = QOperand(kind, post=parts.get("post"))
    for name in ("data", "values", "unit"):
        if name in parts:
            setattr(out, name, _ungrouped(parts[name], kind.rows, cols))
    if "scale" in parts:
        out.scale = parts["scale"].reshape(mp // kind.rows, kp // cols)
    return out
