"""τ, the FP8 dV product's per-key row scale, in one launch (`reference.dv_row_scale` computes the same values).

τ_j is the largest s_dO among the queries that may see key j, over the query heads that share j's K/V head: under a
causal mask the suffix max of dO's per-token scales along the sequence. PyTorch computes it in four kernels (a
flip, `cummax` with its indices, a flip back, an amax over the heads: 55 µs and four host dispatches a backward at
S = 8k, B×H = 64 on the H200, scripts/launch_gaps.py in session 20). Here one program per K/V head walks the sequence
from its end in blocks, takes the max over the heads sharing it, scans each block (reversed) and carries the max
into the next: the same values bit for bit (a max is exact; NaN propagates as in `cummax` and `amax`). Document
masking and non-causal attention keep the reference's PyTorch path.
"""
from __future__ import annotations

import torch

from ._triton_env import HAS_TRITON, can_run_triton
from .reference import dv_row_scale
from .relaunch import Relaunch

if HAS_TRITON:
    import triton
    import triton.language as tl

    @triton.jit
    def _max_nan(a, b):
        return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)

    @triton.jit
    def _suffix_max_kernel(SCALE, TAU, S, n_blocks, G: tl.constexpr, BLOCK: tl.constexpr):
        """TAU[bk, j] = max over g < G and i >= j of SCALE[bk·G + g, i] (rows of S floats, n_blocks = ⌈S / BLOCK⌉),
        one program per bk."""
        bk = tl.program_id(0).to(tl.int64)
        rev = BLOCK - 1 - tl.arange(0, BLOCK)  # a block read back to front: a forward scan is then a suffix max
        carry = tl.full([1], float("-inf"), tl.float32)
        for i in range(0, n_blocks):
            pos = (n_blocks - 1 - i) * BLOCK + rev
            keep = pos < S
            m = tl.load(SCALE + bk * G * S + pos, mask=keep, other=float("-inf"))
            for g in tl.static_range(1, G):
                m = _max_nan(m, tl.load(SCALE + (bk * G + g) * S + pos, mask=keep, other=float("-inf")))
            m = _max_nan(tl.associative_scan(m, 0, _max_nan), carry)
            tl.store(TAU + bk * S + pos, m, mask=keep)
            carry = tl.reduce(m, 0, _max_nan, keep_dims=True)


# launched every backward of the fp8 fast path: `relaunch.Relaunch` (Triton's launch path once per plan)
_LAUNCH = Relaunch(_suffix_max_kernel) if HAS_TRITON else None
BLOCK = 1024  # tokens a step: S = 8k in eight steps, 8 floats a thread at 4 warps


def dv_row_scale_fast(do_scale: torch.Tensor, hkv: int, causal: bool, doc_index: torch.Tensor | None = None):
    """`reference.dv_row_scale` (same arguments, same values), causal and without documents in one Triton launch
    where Triton runs (CUDA; the interpreter on the CPU), else the reference's PyTorch."""
    if not causal or doc_index is not None or not can_run_triton(do_scale):
        return dv_row_scale(do_scale, hkv, causal, doc_index)
    b, hq, seq = do_scale.shape
    scale = do_scale.float().contiguous()
    tau = torch.empty(b, hkv, seq, dtype=torch.float32, device=scale.device)
    if tau.numel():
        _LAUNCH((b * hkv,), (scale, tau, seq, triton.cdiv(seq, BLOCK)), dict(G=hq // hkv, BLOCK=BLOCK),
                dict(num_warps=4))
    return tau
