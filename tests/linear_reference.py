"""PyTorch reference of the quantized linear GEMMs, built from `flamia_kernels.formats` directly.

Independent of `linear_quant`: 2-D blocks are quantized by an explicit loop over blocks,
the Hadamard matrix is built from its bit formula. Everything is dequantized to fp32 and
multiplied in fp32, so the CPU path of `quantized_linear` must match bit for bit. Random
draws follow the documented seed contract `mix_seed(seed, salt)` (docs/linear.md).
"""
from __future__ import annotations

import torch
from flamia_kernels import formats as FM
from flamia_kernels import linear_gemm as G
from flamia_kernels.hadamard import mix_seed, random_signs


def _fp8_blocks_2d(t: torch.Tensor, block: int) -> torch.Tensor:
    out = torch.empty_like(t, dtype=torch.float32)
    for i in range(0, t.shape[0], block):
        for j in range(0, t.shape[1], block):
            blk = t[i:i + block, j:j + block].float()
            s = FM.fp8_scale(blk.abs().amax())
            out[i:i + block, j:j + block] = FM.dequantize_fp8(FM.quantize_fp8(blk, s), s)
    return out


def _nvfp4_blocks_2d(t: torch.Tensor, block: int = 16) -> torch.Tensor:
    glob = FM.nvfp4_global_scale(t.abs().amax())
    out = torch.empty_like(t, dtype=torch.float32)
    for i in range(0, t.shape[0], block):
        for j in range(0, t.shape[1], block):
            blk = t[i:i + block, j:j + block].float()
            denom = FM.nvfp4_block_scale(blk.abs().amax(), glob).float() * glob
            v = torch.where(denom == 0, 0.0, blk / denom)
            out[i:i + block, j:j + block] = FM.e2m1_to_float(FM.e2m1_codes(v)) * denom
    return out


def ref_quant(t: torch.Tensor, fmt: str, operand: str, gen: torch.Generator | None = None,
              row_global: bool = False) -> torch.Tensor:
    """fp32 dequantized t [M, K] along K; operand "act" (X / dY) or "w" (the weight as B)."""
    t = t.float()
    if fmt == "fp8":
        return FM.dequantize_fp8(*FM.quantize_fp8_per_token(t))
    if fmt == "fp8-block":
        if operand == "w":
            return _fp8_blocks_2d(t, 128)
        m, k = t.shape
        return FM.dequantize_fp8(*FM.quantize_fp8_per_token(t.reshape(m, k // 128, 128))).reshape(m, k)
    if fmt == "mxfp8":
        return FM.dequantize_mxfp8(*FM.quantize_mxfp8(t))
    if operand == "w":
        return _nvfp4_blocks_2d(t)
    glob = FM.nvfp4_per_token_global_scale(t) if row_global else None
    return FM.dequantize_nvfp4(FM.quantize_nvfp4(t, 16, glob, stochastic=gen is not None, generator=gen))


def _gen(seed, salt):
    return torch.Generator().manual_seed(mix_seed(seed, salt))


def ref_fprop(x, w, fmt):
    return ref_quant(x, fmt, "act", row_global=fmt == "nvfp4") @ ref_quant(w, fmt, "w").t()


def ref_dgrad(dy, w, fmt, seed):
    gen = _gen(seed, G.DGRAD_SR_SALT) if fmt == "nvfp4" else None
    wq = ref_quant(w, fmt, "w").t() if fmt in ("fp8-block", "nvfp4") else ref_quant(w.t(), fmt, "w")
    return ref_quant(dy, fmt, "act", gen) @ wq.t()


def ref_wgrad(dy, x, fmt, seed):
    a, b = dy.t().float(), x.t().float()
    gen = None
    if fmt == "nvfp4":
        signs = random_signs(mix_seed(seed, G.RHT_SALT))
        # Sylvester's H[i, j] = (-1)^popcount(i & j), built independently of hadamard_matrix
        h = torch.tensor([[(-1.0) ** bin(i & j).count("1") for j in range(16)] for i in range(16)])
        m = signs[:, None] * h / 4
        a, b = ((t.reshape(t.shape[0], -1, 16) @ m).reshape(t.shape) for t in (a, b))
        gen = _gen(seed, G.WGRAD_SR_SALT)
    return ref_quant(a, fmt, "act", gen) @ ref_quant(b, fmt, "act").t()
