"""ρ, the FP8 dQ product's per-query scale (launch options ds_out with fp8_dq), in one launch: the values of
`reference.dq_row_scale` for the fast path's case (causal, K's and V's token-block copies, no documents).

ρ_i is the smallest power of two at or above a bound on |dS_ij · s_k(i, j)| / 448 over the keys query i sees, known
before the backward runs (the reference's docstring derives it): from the query's 1/l, delta and s_dO (the dK/dV
kernel's statistics, `attention_bwd_copies.query_stats`, already written), ‖dO8_i‖₁ (dO's bytes), the prefix max of
s_k·s_v and s_k over the keys of i's own token block up to i, and the max of the copies' block scales' products over
the earlier blocks. PyTorch takes ~35 kernels for it (~0.1 ms at S = 8k, B×H = 64, estimated from their count, and as
many host dispatches a backward); here one program per block of a query head's queries computes it and writes both ρ
and 1/ρ — the latter into the statistics' row the dK/dV kernel reads (`attention_bwd_gluon.DS_IRHO_ROW`).

The same values as the reference: the same fp32 products in the same order (the launch turns off Triton's fusion of a
multiply and an add into one rounding, `enable_fp_fusion`), maxima exact, and the power of two taken from the bound's
bits (`_pow2_at_least`), as `reference.pow2_at_least` takes it (tests/test_dq_row_scale.py).
"""
from __future__ import annotations

import torch

from ._triton_env import HAS_TRITON, can_run_triton
from .reference import dq_row_scale
from .relaunch import Relaunch

if HAS_TRITON:
    import triton
    import triton.language as tl

    from .dv_row_scale import _max_nan
    from .quantize import _e4m3_row_l1

    @triton.jit
    def _pow2_at_least(x):
        """`reference.pow2_at_least` in Triton: the smallest power of two >= x > 0 from its bits (x itself where its
        mantissa is zero, else the next exponent's power; 2^-126 at least), 1 where x <= 0 or NaN, +Inf stays."""
        bits = x.to(tl.int32, bitcast=True)
        up = ((bits >> 23) + ((bits & 0x7FFFFF) != 0).to(tl.int32)) << 23
        return tl.where(x > 0, tl.where(bits >= 0x7F800000, x, up.to(tl.float32, bitcast=True)), 1.0)

    @triton.jit
    def _dq_row_scale_kernel(DO8, L1, STATS, KS, VS, KBS, VBS, RHO, S, G, D: tl.constexpr, TB: tl.constexpr,
                             NT: tl.constexpr, ROWS: tl.constexpr, IRHO_ROW: tl.constexpr,
                             HAS_L1: tl.constexpr = False):
        """ρ for TB queries (token block t) of query head bh; 1/ρ into STATS' row IRHO_ROW. HAS_L1: ‖dO8_i‖₁ from L1
        (the dO pass's, `quantize.quantize_fp8_per_token_with_delta(row_l1=True)`) instead of from dO's bytes, whose
        read (S·D bytes a head) was most of this kernel's time (37 µs at S = 8k, B×H = 64 on an H100)."""
        t = tl.program_id(0)
        bh = tl.program_id(1).to(tl.int64)
        bhk = bh // G
        offs = t * TB + tl.arange(0, TB)
        stats = STATS + bh * ROWS * S + offs
        linv = tl.load(stats + 2 * S)
        delta = tl.load(stats + 3 * S)
        sdo = tl.load(stats + 4 * S)
        if HAS_L1:
            l1 = tl.load(L1 + bh * S + offs)
        else:
            byte = tl.load(DO8 + (bh * S + offs)[:, None] * D + tl.arange(0, D)[None, :]).to(tl.int32)
            l1 = _e4m3_row_l1(byte)
        f = ((linv * sdo) * l1) * 448.0
        g = linv * tl.abs(delta)
        ks = tl.load(KS + bhk * S + offs)
        vs = tl.load(VS + bhk * S + offs)
        kv_own = tl.associative_scan(ks * vs, 0, _max_nan)  # keys j <= i of i's own block
        k_own = tl.associative_scan(ks, 0, _max_nan)
        blocks = tl.arange(0, NT)
        earlier = blocks < t
        kb = tl.load(KBS + bhk * (S // TB) + blocks, mask=earlier, other=0.0)
        vb = tl.load(VBS + bhk * (S // TB) + blocks, mask=earlier, other=0.0)
        kv_off = tl.reduce(kb * vb, 0, _max_nan)  # the earlier blocks' copies (0 for the first block)
        k_off = tl.reduce(kb, 0, _max_nan)
        bound = _max_nan(f * kv_own + g * k_own, f * kv_off + g * k_off) * (1.0 / 448.0)
        rho = _pow2_at_least(bound)
        tl.store(RHO + bh * S + offs, rho)
        tl.store(stats + IRHO_ROW * S, tl.math.div_rn(tl.full([TB], 1.0, tl.float32), rho))  # exact: a power of two


_LAUNCH = Relaunch(_dq_row_scale_kernel) if HAS_TRITON else None
TB = 128  # queries a program: the forward's token block (the copies' block)


def dq_row_scale_fast(do, k, v, stats: torch.Tensor, irho_row: int, causal: bool = True,
                      do_l1: torch.Tensor | None = None) -> torch.Tensor:
    """ρ [B, Hq, S] fp32 (`reference.dq_row_scale`'s values) from dO's operand, K's and V's (with their token-block
    copies' block scales, `OffDiagonal`) and the queries' statistics (`attention_bwd_copies.query_stats`, filled:
    1/l, delta and s_dO), writing 1/ρ into stats' row irho_row too. Causal with the copies, in one Triton launch
    where Triton runs; else the reference's PyTorch from the same statistics. do_l1 [B, Hq, S] fp32: each query's
    Σ_d |dO8| as the dO pass wrote it (`quantize.quantize_fp8_per_token_with_delta(row_l1=True)`), so that the
    launch does not read dO's bytes again."""
    b, hq, seq, d = do.vals.shape
    hkv = k.vals.shape[1]
    rows = stats.shape[1]
    st = stats.view(b, hq, rows, seq)
    fast = (causal and k.off is not None and v.off is not None and k.off.block == TB == v.off.block
            and seq % TB == 0 and can_run_triton(do.vals))
    if not fast:
        rho = dq_row_scale(do, st[:, :, 3], st[:, :, 2], k.scale, k.off.per_token_scale() if k.off else None,
                           v.scale, v.off.per_token_scale() if v.off else None, causal)
        st[:, :, irho_row] = 1.0 / rho
        return rho
    if do_l1 is not None and (do_l1.shape != (b, hq, seq) or do_l1.dtype != torch.float32):
        raise ValueError(f"dq_row_scale_fast: do_l1 {tuple(do_l1.shape)} {do_l1.dtype} must be [B, Hq, S] = "
                         f"{(b, hq, seq)} fp32 (each query's Σ_d |dO8|)")
    rho = torch.empty(b, hq, seq, dtype=torch.float32, device=do.vals.device)
    n_blocks = seq // TB
    _LAUNCH((n_blocks, b * hq),
            (do.vals.view(torch.uint8), rho if do_l1 is None else do_l1.contiguous(), stats,
             k.scale.float().contiguous(), v.scale.float().contiguous(), k.off.scale.float().contiguous(),
             v.off.scale.float().contiguous(), rho, seq, hq // hkv),
            dict(D=d, TB=TB, NT=triton.next_power_of_2(n_blocks), ROWS=rows, IRHO_ROW=irho_row,
                 HAS_L1=do_l1 is not None),
            dict(num_warps=4, enable_fp_fusion=False))
    return rho
