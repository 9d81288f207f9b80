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
    def _load_tile(T, offs_m, offs_k, M, K, stride_tm, stride_tk):
        """fp32 [BLOCK_M, BLOCK_K] of t at rows offs_m, columns offs_k; zero outside [M, K] (the padding)."""
        return tl.load(T + offs_m.to(tl.int64)[:, None] * stride_tm + offs_k.to(tl.int64)[None, :] * stride_tk,
                       mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0).to(tl.float32)

    @triton.jit
    def _row_scales(amax_bits, TINY: tl.constexpr, BLOCK_M: tl.constexpr):
        """One E4M3 scale per row, ``max(amax, TINY) / 448`` in IEEE division, from its amax bits."""
        amax = amax_bits.to(tl.float32, bitcast=True)
        return tl.math.div_rn(_clamp_tiny(amax, TINY), tl.full((BLOCK_M,), 448.0, tl.float32))

    @triton.jit
    def _store_bytes(Q, v, offs_m, offs_k, Mp, Kp, stride_qm, stride_qk):
        """E4M3 codes of the scaled tile v into Q [Mp, Kp] (zeros in the padding, where v is 0)."""
        tl.store(Q + offs_m.to(tl.int64)[:, None] * stride_qm + offs_k.to(tl.int64)[None, :] * stride_qk,
                 _e4m3_code(v).to(tl.uint8), mask=(offs_m[:, None] < Mp) & (offs_k[None, :] < Kp))

    @triton.jit
    def _fp8_operand_kernel(
        T, Q, Scale, M, K, Mp, Kp,
        stride_tm, stride_tk, stride_qm, stride_qk, stride_sm, stride_sk,
        TINY: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, TILE_SCALE: tl.constexpr,
    ):
        """One program: BLOCK_M rows × BLOCK_K columns of t, zero outside [M, K].

        TILE_SCALE: one scale for the tile (rows × cols blocks); else one per row of the tile
        (1 × cols blocks, or rowwise when BLOCK_K covers Kp; longer rows: `_row_amax_kernel`)."""
        pid_m = tl.program_id(0)
        pid_k = tl.program_id(1)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
        x = _load_tile(T, offs_m, offs_k, M, K, stride_tm, stride_tk)
        if TILE_SCALE:
            amax = tl.max(tl.max(_abs_bits(x), axis=1), axis=0).to(tl.float32, bitcast=True)
            scale = tl.math.div_rn(_clamp_tiny(amax, TINY), 448.0)
            tl.store(Scale + pid_m.to(tl.int64) * stride_sm + pid_k.to(tl.int64) * stride_sk, scale)
            v = tl.math.div_rn(x, tl.broadcast_to(scale, (BLOCK_M, BLOCK_K)))
        else:
            scale = _row_scales(tl.max(_abs_bits(x), axis=1), TINY, BLOCK_M)
            tl.store(Scale + offs_m.to(tl.int64) * stride_sm + pid_k.to(tl.int64) * stride_sk, scale,
                     mask=offs_m < Mp)
            v = tl.math.div_rn(x, tl.broadcast_to(scale[:, None], (BLOCK_M, BLOCK_K)))
        _store_bytes(Q, v, offs_m, offs_k, Mp, Kp, stride_qm, stride_qk)

    @triton.jit
    def _row_amax_kernel(T, AMAX, M, K, stride_tm, stride_tk, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
        """Rowwise scales of rows too long for one tile, step 1: each program folds its BLOCK_M ×
        BLOCK_K tile's |x| bits into the rows' running max (int32 AMAX, zeros first). Every tile of
        a row runs at once instead of one program walking the row: wgrad's dYᵀ and Xᵀ rows are
        the tokens, 8K+ long, and there are only out/64 of them per operand."""
        offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
        x = _load_tile(T, offs_m, offs_k, M, K, stride_tm, stride_tk)
        # |bits| of floats order as the values do (NaN above inf): an integer max is the amax, NaN-propagating
        tl.atomic_max(AMAX + offs_m, tl.max(_abs_bits(x), axis=1), mask=offs_m < M, sem="relaxed")

    @triton.jit
    def _row_bytes_kernel(
        T, Q, Scale, AMAX, M, K, Mp, Kp, stride_tm, stride_tk, stride_qm, stride_qk,
        TINY: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
    ):
        """Step 2: the row's scale from its finished amax, then this tile's bytes (the first
        column of programs also stores the scales)."""
        pid_k = tl.program_id(1)
        offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
        scale = _row_scales(tl.load(AMAX + offs_m, mask=offs_m < Mp, other=0), TINY, BLOCK_M)
        tl.store(Scale + offs_m, scale, mask=(offs_m < Mp) & (pid_k == 0))
        x = _load_tile(T, offs_m, offs_k, M, K, stride_tm, stride_tk)
        v = tl.math.div_rn(x, tl.broadcast_to(scale[:, None], (BLOCK_M, BLOCK_K)))
        _store_bytes(Q, v, offs_m, offs_k, Mp, Kp, stride_qm, stride_qk)


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
    """(BLOCK_M, BLOCK_K, K_STEPS) for t with rows × cols blocks over a padded K of kp; K_STEPS > 1:
    rowwise rows longer than one tile (BLOCK_K), which take the two-launch split path."""
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
    scales are orientation-free). `max_block_k`: widest rowwise tile (tests force the split
    path for long rows with it: `_row_amax_kernel`, then `_row_bytes_kernel`). Requires
    `supported(t, rows, cols)` and a Triton-capable t.
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
    nw = max(4, min(16, (block_m * block_k) // 1024))
    with torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext():
        if k_steps > 1:  # rowwise over rows longer than a tile: every tile at once, in two launches
            grid = (triton.cdiv(mp, block_m), k_steps)
            amax = torch.zeros(mp, dtype=torch.int32, device=t.device)
            _row_amax_kernel[grid](t, amax, m, k, t.stride(0), t.stride(1), BLOCK_M=block_m, BLOCK_K=block_k,
                                   num_warps=nw)
            _row_bytes_kernel[grid](t, data.view(torch.uint8), scale, amax, m, k, mp, kp, t.stride(0), t.stride(1),
                                    sq[0], sq[1], TINY=FM.FP8_TINY, BLOCK_M=block_m, BLOCK_K=block_k, num_warps=nw)
        else:
            _fp8_operand_kernel[(triton.cdiv(mp, block_m), kp // block_k if cols else 1)](
                t, data.view(torch.uint8), scale, m, k, mp, kp, t.stride(0), t.stride(1), sq[0], sq[1], ss[0], ss[1],
                TINY=FM.FP8_TINY, BLOCK_M=block_m, BLOCK_K=block_k, TILE_SCALE=rows > 1, num_warps=nw,
            )
    return data, scale
