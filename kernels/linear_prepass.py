"""Fused Triton quantizer of the FP8 linear operands: one launch where `linear_quant` runs ~17 ops.

`quantize_fp8_operand(t, rows, cols, mp, kp)` reads t [M, K] (bf16 / fp16 / fp32, any strides:
the transposed views ``w.t()``, ``dy.t()``, ``x.t()`` of dgrad and wgrad are read in place) and
writes the E4M3 bytes [Mp, Kp] (row-major, the layout ``torch._scaled_mm`` takes, so no
``.contiguous()`` copy follows) and the fp32 scales [Mp/rows, Kp/cols], zero-padding M and K
with masks. Scale blocks: ``rows == 1, cols == 0`` one scale per row (fp8 rowwise),
``1 × cols`` (fp8-block activations, 1×128), ``rows × cols`` (fp8-block weights, 128×128;
`transposed` writes the transposed operand directly, dgrad's B, saving the byte-transpose copy).

The bytes and scales are those of `linear_quant`'s PyTorch path (`formats.quantize_fp8_per_token`
on each scale block) bit for bit, by the pre-pass's integer helpers from `quantize.py`: amax as an
integer max over |bits| (NaN-propagating), ``scale = max(amax, FP8_TINY) / 448`` and
``x / scale`` in IEEE division (`div_rn`), E4M3 codes by `quantize._e4m3_code` (integer
rounding under the interpreter, the GPU's nearest-even conversion there: the same bytes).
Callers (`linear_quant.quantize_operand`) fall back to the PyTorch path when Triton cannot run
on t (`_triton_env.can_run_triton`) or `supported` says no; stats-recording steps take that path too.
"""
from __future__ import annotations

import contextlib

import torch

from . import formats as FM
from ._triton_env import HAS_TRITON, INTERPRET

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# Elements per program: large under the interpreter (per-program overhead dominates there),
# ~4-8K on the GPU (a memory-bound pass; keeps registers low).
_TILE = 1 << 16 if INTERPRET else 1 << 13
_MAX_ROW_TILE = 1 << 14  # rowwise over a contiguous K: widest row held whole in one tile
_COLUMN_ROWS = 64  # rows per tile when M is the source's contiguous dim (transposed views): coalesced loads

if HAS_TRITON:
    import triton
    import triton.language as tl

    from .quantize import _abs_bits, _clamp_tiny, _e4m3_code

    @triton.jit
    def _fp8_operand_kernel(
        T, Q, Scale, M, K, Mp, Kp,
        stride_tm, stride_tk, stride_qm, stride_qk, stride_sm, stride_sk,
        TINY: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
        TILE_SCALE: tl.constexpr, K_STEPS: tl.constexpr,
    ):
        """One program: BLOCK_M rows × BLOCK_K columns of t, zero outside [M, K].

        TILE_SCALE: one scale for the tile (rows × cols blocks); else one per row of the tile
        (1 × cols blocks, or rowwise when BLOCK_K covers Kp). K_STEPS > 1: rowwise over Kp in
        K_STEPS tiles of BLOCK_K, two reads (amax, then bytes) for rows too long to hold in one tile
        (a constexpr bound: Triton 3.6's interpreter cannot take a run-time one under NumPy 2.4)."""
        pid_m = tl.program_id(0)
        pid_k = tl.program_id(1)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rows_t = offs_m.to(tl.int64)[:, None] * stride_tm
        rows_q = offs_m.to(tl.int64)[:, None] * stride_qm
        in_m = offs_m[:, None] < M
        out_m = offs_m[:, None] < Mp
        if K_STEPS > 1:
            amax_bits = tl.zeros((BLOCK_M,), dtype=tl.int32)
            for step in range(K_STEPS):
                offs_k = step * BLOCK_K + tl.arange(0, BLOCK_K)
                x = tl.load(T + rows_t + offs_k.to(tl.int64)[None, :] * stride_tk,
                            mask=in_m & (offs_k[None, :] < K), other=0.0).to(tl.float32)
                amax_bits = tl.maximum(amax_bits, tl.max(_abs_bits(x), axis=1))
            amax = amax_bits.to(tl.float32, bitcast=True)
            scale = tl.math.div_rn(_clamp_tiny(amax, TINY), tl.full((BLOCK_M,), 448.0, tl.float32))
            tl.store(Scale + offs_m.to(tl.int64) * stride_sm, scale, mask=offs_m < Mp)
            for step in range(K_STEPS):
                offs_k = step * BLOCK_K + tl.arange(0, BLOCK_K)
                x = tl.load(T + rows_t + offs_k.to(tl.int64)[None, :] * stride_tk,
                            mask=in_m & (offs_k[None, :] < K), other=0.0).to(tl.float32)
                byte = _e4m3_code(tl.math.div_rn(x, tl.broadcast_to(scale[:, None], (BLOCK_M, BLOCK_K))))
                tl.store(Q + rows_q + offs_k.to(tl.int64)[None, :] * stride_qk, byte.to(tl.uint8),
                         mask=out_m & (offs_k[None, :] < Kp))
        else:
            offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
            x = tl.load(T + rows_t + offs_k.to(tl.int64)[None, :] * stride_tk,
                        mask=in_m & (offs_k[None, :] < K), other=0.0).to(tl.float32)
            if TILE_SCALE:
                amax = tl.max(tl.max(_abs_bits(x), axis=1), axis=0).to(tl.float32, bitcast=True)
                scale = tl.math.div_rn(_clamp_tiny(amax, TINY), 448.0)
                tl.store(Scale + pid_m.to(tl.int64) * stride_sm + pid_k.to(tl.int64) * stride_sk, scale)
                v = tl.math.div_rn(x, tl.broadcast_to(scale, (BLOCK_M, BLOCK_K)))
            else:
                amax = tl.max(_abs_bits(x), axis=1).to(tl.float32, bitcast=True)
                scale = tl.math.div_rn(_clamp_tiny(amax, TINY), tl.full((BLOCK_M,), 448.0, tl.float32))
                tl.store(Scale + offs_m.to(tl.int64) * stride_sm + pid_k.to(tl.int64) * stride_sk, scale,
                         mask=offs_m < Mp)
                v = tl.math.div_rn(x, tl.broadcast_to(scale[:, None], (BLOCK_M, BLOCK_K)))
            tl.store(Q + rows_q + offs_k.to(tl.int64)[None, :] * stride_qk, _e4m3_code(v).to(tl.uint8),
                     mask=out_m & (offs_k[None, :] < Kp))


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def supported(t: torch.Tensor, rows: int, cols: int) -> bool:
    """True if the kernel takes t [M, K] with rows × cols scale blocks (cols 0: the whole row).

    Rowwise (1 × 0), 1 × cols and rows × cols tiles with power-of-two sides of at most 16K
    elements; bf16 / fp16 / fp32 input; a non-empty 2-D tensor."""
    if not HAS_TRITON or t.dim() != 2 or t.dtype not in DTYPES or t.numel() == 0:
        return False
    if cols == 0:
        return rows == 1
    return _is_pow2(rows) and _is_pow2(cols) and rows * cols <= 1 << 14


def _blocks(t: torch.Tensor, rows: int, cols: int, kp: int, max_block_k: int | None) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_K, K_STEPS) for t with rows × cols blocks over a padded K of kp."""
    if rows > 1:
        return rows, cols, 1
    column_major = t.stride(0) == 1 and t.stride(1) != 1  # a transposed view: M is contiguous
    if cols:
        block_m = _COLUMN_ROWS if column_major else max(1, min(256, _TILE // cols))
        return block_m, cols, 1
    widest = max_block_k or (max(16, _TILE // _COLUMN_ROWS) if column_major else _MAX_ROW_TILE)
    block_k = min(_pow2(kp), _pow2(widest))
    block_m = _COLUMN_ROWS if column_major else max(1, min(256, _TILE // block_k))
    return block_m, block_k, -(-kp // block_k)


def quantize_fp8_operand(t: torch.Tensor, rows: int, cols: int, mp: int, kp: int, *, transposed: bool = False,
                         max_block_k: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """E4M3 bytes [Mp, Kp] and fp32 scales [Mp/rows, Kp/cols] of t [M, K] zero-padded to [mp, kp].

    cols 0: one scale per row over all of kp. `transposed`: the transposed operand instead,
    bytes [Kp, Mp] and scales [Kp/cols, Mp/rows], both contiguous (2-D blocks only: their
    scales are orientation-free). `max_block_k`: widest rowwise tile (tests force the chunked
    two-read path with it). Requires `supported(t, rows, cols)` and a Triton-capable t.
    """
    m, k = t.shape
    group = cols or kp
    if mp % rows or kp % group or mp < m or kp < k:
        raise ValueError(f"fp8 operand: padded shape [{mp}, {kp}] does not cover [{m}, {k}] in {rows}x{group} blocks")
    if transposed and rows == 1:
        raise ValueError("fp8 operand: only 2-D scale blocks give a transposed operand")
    block_m, block_k, k_steps = _blocks(t, rows, cols, kp, max_block_k)
    shape, sshape = (mp, kp), (mp // rows, kp // group)
    if transposed:
        shape, sshape = shape[::-1], sshape[::-1]
    data = torch.empty(shape, dtype=FM.FP8_DTYPE, device=t.device)
    scale = torch.empty(sshape, dtype=torch.float32, device=t.device)
    sq, ss = data.stride(), scale.stride()
    if transposed:
        sq, ss = sq[::-1], ss[::-1]
    grid = (triton.cdiv(mp, block_m), kp // block_k if cols else 1)
    with torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext():
        _fp8_operand_kernel[grid](
            t, data.view(torch.uint8), scale, m, k, mp, kp, t.stride(0), t.stride(1), sq[0], sq[1], ss[0], ss[1],
            TINY=FM.FP8_TINY, BLOCK_M=block_m, BLOCK_K=block_k, TILE_SCALE=rows > 1, K_STEPS=k_steps,
            num_warps=max(4, min(16, (block_m * block_k) // 1024)),
        )
    return data, scale
