"""FLAMIA attention in plain PyTorch: the same quantized math as the Triton kernels, the tests' oracle.

Same quantizers (`formats`), same scale granularities, same P and dS quantization,
same rounding points, vectorised over whole [S, S] score matrices (fast enough
at S <= 512 on a CPU, which is where training falls back to it when Triton's
interpreter is off). The math, one query row i, key j <= i (log2 units, c = sm_scale·log2 e):

    s_ij  = (q8_i · k8_j) · (s_q[i]·c · s_k[j])            scores from the quantized Q, K
    M_i   = ceil(max_j s_ij)                               integer row max (power-of-two rescales)
    p_ij  = exp2(s_ij - M_i),  l_i = Σ_j p_ij               unquantized softmax numerator and sum
    r_in  = max s_v[j] over key tile n, j <= i             V's per-token scale folded into P
    x_ij  = p_ij · s_v[j] · (1 / r_in)  <= 1               then P quantized per `pv` (fp8: ×256)
    O_i   = Σ_n r_in Σ_{j∈n} deq(x)_ij · v8_j / l_i

Backward (straight-through for every quantizer; dO quantized per `do`, dS per `ds`):
dV_j = (1/s_v[j]) Σ_i deq(x)_ij · bf16(dO_i · r_in / l_i), or where pv and do are both fp8 (`fp8_dv`) one
FP8 product, dV_j = (τ_j / 256) Σ_i E4M3(p_ij · (s_dO[i] / l_i) / τ_j) · dO8_i, with p ×256 and τ_j the
largest s_dO among the queries that may see key j (`dv_row_scale`); dP = dO·Vᵀ; dS = P ∘ (dP - delta)
with P = p / l and delta = rowsum(dO ∘ O) from the fp8-saved O; dQ = sm_scale·Σ deq(dS∘s_k)·k8,
dK = sm_scale·Σ deq(dSᵀ∘s_q)·q8 with dS quantized along each product's contraction axis, one
scale per row and DS_TILE-long group (the backward kernels' sub-tile).

Document masking (`doc_ids`): "j <= i" above becomes "j <= i and j in i's document", in the
mask and in r_in alike: r is the max over the tile's keys that row i *sees*, so a row's P bytes
depend on its own document only (a tile where it sees nothing has P = 0; r is then 1).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as TF

from . import formats as F
from .attention_operands import (
    ForwardOperands,
    Operand,
    attach_off_diagonal,
    backward_delta,
    prepare_forward,
    quantize_operand,
)
from .attention_operands import quantize_output as _quantize_output
from .document import doc_tables, document_causal_mask
from .spec import SEQ_BLOCK, AttentionSpec

LOG2E = 1.4426950408889634
P_FP8_SCALE = 1.0 / 256.0  # fixed P scale: x in [0, 1] -> [0, 256] in E4M3, a power of two (exact)
# dS's scale group along each product's contraction axis (queries for dK, keys for dQ): the
# backward kernels' sub-tile, smaller than SEQ_BLOCK so the [128, 64] tiles fit in registers.
DS_TILE = 64


def p_nvfp4_global() -> torch.Tensor:
    """Fixed NVFP4 global scale of P (x <= 1): formats' global for amax 1, as fp32."""
    return F.nvfp4_global_scale(torch.tensor(1.0))


def quant_rows(x: torch.Tensor, fmt: str, fixed: bool, tile: int = SEQ_BLOCK):
    """Quantize x [..., R, C] along its last dim, as the kernels do one [R, tile] tile at a time.

    fixed: P's scales (fp8 ×256, NVFP4 global of amax 1); else a scale per row and tile
    (dS). Returns (vals, scale) with deq = vals * scale; vals exact in bf16 (or fp8).
    """
    if fmt == "bf16":
        return x.to(torch.bfloat16).float(), 1.0
    if fmt == "mxfp8":
        return F.dequantize_mxfp8(*F.quantize_mxfp8(x)), 1.0
    xt = x.unflatten(-1, (x.shape[-1] // tile, tile))  # (..., R, tiles, tile)
    if fmt == "fp8":
        if fixed:
            return F.quantize_fp8(x, torch.tensor(P_FP8_SCALE)).float(), P_FP8_SCALE
        x8, scale = F.quantize_fp8_per_token(xt)
        return x8.float().flatten(-2), scale.expand(xt.shape).flatten(-2)
    if fmt == "nvfp4":
        if fixed:
            glob = p_nvfp4_global().to(x.device).reshape((1,) * xt.dim())
        else:
            glob = F.nvfp4_per_token_global_scale(xt)
        q = F.quantize_nvfp4(xt, F.NVFP4_BLOCK, glob)
        vals = F.dequantize_nvfp4(F.NVFP4Tensor(q.codes, q.block_scale, torch.ones_like(glob))).flatten(-2)
        return vals, (glob.item() if fixed else glob.expand(xt.shape).flatten(-2))
    raise ValueError(f"unknown format {fmt!r}")


def dv_row_scale(do_scale: torch.Tensor, hkv: int, causal: bool, doc_index: torch.Tensor | None = None) -> torch.Tensor:
    """τ [B, Hkv, S] fp32 from dO's per-token scales [B, Hq, S]: for each key j, the largest s_dO among the
    queries that may see it (i >= j when causal, every query otherwise; with `doc_index`, the dense document index
    [B, S] of `document.doc_tables`, only those of j's document) over the query heads sharing its K/V head.

    The FP8 dV product's scale of row j (`AttentionSpec.fp8_dv`): P_ij · s_dO[i] / τ_j <= 1 for every query i
    that sees key j, so ×256 fits E4M3 as P does in the forward, and τ_j is one number along the product's
    contraction (the queries), so one accumulator chains every query sub-tile. A per-row scale of Pᵀ chosen
    after the mask (FLAMIA.md): where dO is zero past a position t (the backward prefix test) those rows carry
    the smallest scale there is, so τ_j for j <= t depends on dO[:t + 1] only; with documents, on j's document
    only (a document's gradients are those of running it alone)."""
    b, hq, seq = do_scale.shape
    if doc_index is None:
        seen = do_scale.flip(-1).cummax(-1).values.flip(-1) if causal else do_scale.amax(-1, keepdim=True)
        seen = seen.expand_as(do_scale)
    else:
        doc = doc_index.to(device=do_scale.device, dtype=torch.int64)[:, None, :].expand(b, hq, seq)
        if causal:  # a suffix max that restarts at each document: the scales' bits (positive floats, so ordered
            # as integers) under a prefix that grows towards earlier documents, read from the end
            rank = doc.amax(-1, keepdim=True) - doc
            bits = do_scale.float().contiguous().view(torch.int32).to(torch.int64)
            key = ((rank << 32) | bits).flip(-1).cummax(-1).values.flip(-1)
            seen = (key & 0xFFFFFFFF).to(torch.int32).view(torch.float32)
        else:  # each document's max
            seen = torch.zeros_like(do_scale, dtype=torch.float32).scatter_reduce(
                -1, doc, do_scale.float(), "amax", include_self=False).gather(-1, doc)
    return seen.reshape(b, hkv, hq // hkv, seq).amax(2).contiguous()


def dk_row_scale(q_scale: torch.Tensor, do: Operand, delta: torch.Tensor, linv: torch.Tensor, v_scale: torch.Tensor,
                 v_off_scale: torch.Tensor | None, causal: bool, tile: int = SEQ_BLOCK) -> torch.Tensor:
    """ρ [B, Hkv, S] fp32, a power of two per key: the scale of an FP8 dK product (launch option fp8_dk, a probe)
    whose A operand is E4M3(dS_ij · s_q[i] / ρ_j), chained over every query like dV's (`dv_row_scale`).

    Not an amax (that needs a reduction over each sub-tile, which cost more than the product saved: session 16),
    a bound known before the backward runs: with p ≤ 256 (×256 probabilities, M the integer row max) and the
    per-token bytes |dO8| ≤ 448, |V8| ≤ 448,

        |dS_ij · s_q[i]| ≤ f_i · s_v(i, j) + g_i,   f_i = s_q[i] / l_i · s_dO[i] · ‖dO8_i‖₁ · 448,
                                                    g_i = s_q[i] / l_i · |delta_i|,

    s_v(i, j) the V scale the pair used (per token on the diagonal tiles, the token-block copy's off them, `_Probs`).
    ρ_j = the smallest power of two ≥ max(s_v[j] · Fd_j + Gd_j, s_vb(j) · Fo_j + Go_j) / 448, with Fd, Gd the largest
    f, g over the queries of j's own tile that see it (i ≥ j when causal) and Fo, Go over the later tiles (every
    other one without `causal`), across the query heads of its K/V head; 1 where that bound is 0. Causally safe as
    τ is: rows with dO = 0 add f = g = 0. No document masking (the probe's scope)."""
    b, hq, seq = q_scale.shape
    hkv = v_scale.shape[1]
    w = q_scale.float() * linv
    f = w * do.scale * do.vals.float().abs().sum(-1) * 448.0
    g = w * delta.abs()
    fg = torch.stack([f, g]).reshape(2, b, hkv, hq // hkv, seq).amax(3)  # (2, B, Hkv, S)
    tiles = fg.unflatten(-1, (seq // tile, tile))  # (2, B, Hkv, T, tile)
    tmax = tiles.amax(-1)  # (2, B, Hkv, T)
    if causal:
        own = tiles.flip(-1).cummax(-1).values.flip(-1).flatten(-2)
        later = torch.cat([tmax.flip(-1).cummax(-1).values.flip(-1)[..., 1:], torch.zeros_like(tmax[..., :1])], -1)
    else:
        own = tmax.repeat_interleave(tile, -1)
        later = tmax.amax(-1, keepdim=True).expand_as(tmax)
    later = later.repeat_interleave(tile, -1)
    vo = v_scale if v_off_scale is None else v_off_scale
    bound = torch.maximum(v_scale.float() * own[0] + own[1], vo.float() * later[0] + later[1]) * (1.0 / 448.0)
    return pow2_at_least(bound)


def dq_row_scale(do: Operand, delta: torch.Tensor, linv: torch.Tensor, k_scale: torch.Tensor,
                 k_off_scale: torch.Tensor | None, v_scale: torch.Tensor, v_off_scale: torch.Tensor | None,
                 causal: bool, tile: int = SEQ_BLOCK, doc_index: torch.Tensor | None = None) -> torch.Tensor:
    """ρ [B, Hq, S] fp32, a power of two per query: the scale of an FP8 dQ product (spec dsk=fp8, launch option fp8_dq)
    whose A operand is E4M3(dS_ij · s_k(i, j) / ρ_i), chained over every key sub-tile.

    `dk_row_scale`'s bound read along the other axis: |dS_ij · s_k(i, j)| ≤ f_i · s_k(i, j) s_v(i, j) + g_i · s_k(i, j),
    f_i = s_dO[i] / l_i · ‖dO8_i‖₁ · 448, g_i = |delta_i| / l_i, the pair's K and V scales per token on i's own
    tile and the token-block copies' off it (without copies, per token everywhere). ρ_i = the smallest power of two
    ≥ max(f_i · KVd_i + g_i · Kd_i, f_i · KVo_i + g_i · Ko_i) / 448, with KVd, Kd the largest s_k s_v, s_k over the
    keys of i's tile that it sees (j ≤ i when causal) and KVo, Ko over the earlier tiles (every other one without
    `causal`); 1 where that bound is 0. It depends on keys up to i only (causally safe). With `doc_index` (the dense
    document index [B, S] of `document.doc_tables`; per-token K and V everywhere, as document masking has no copies)
    KVd, Kd are the largest s_k s_v, s_k over the keys i sees in its own document and the earlier terms drop: ρ_i
    depends on i's document only (a document's gradients are those of running it alone)."""
    b, hq, seq = do.scale.shape
    hkv = k_scale.shape[1]
    f = linv * do.scale * do.vals.float().abs().sum(-1) * 448.0
    g = linv * delta.abs()
    if doc_index is not None:
        tok = torch.stack([k_scale.float() * v_scale.float(), k_scale.float()])  # (2, B, Hkv, S)
        doc = doc_index.to(device=tok.device, dtype=torch.int64)[None, :, None, :].expand_as(tok)
        if causal:  # a prefix max that restarts at each document (scales are positive floats: ordered as integers)
            bits = tok.contiguous().view(torch.int32).to(torch.int64)
            seen = (((doc << 32) | bits).cummax(-1).values & 0xFFFFFFFF).to(torch.int32).view(torch.float32)
        else:  # each document's max
            seen = torch.zeros_like(tok).scatter_reduce(-1, doc, tok, "amax", include_self=False).gather(-1, doc)
        seen = seen.repeat_interleave(hq // hkv, 2)
        return pow2_at_least((f * seen[0] + g * seen[1]) * (1.0 / 448.0))
    ko = k_scale if k_off_scale is None else k_off_scale
    vo = v_scale if v_off_scale is None else v_off_scale
    tok = torch.stack([k_scale.float() * v_scale.float(), k_scale.float()])  # (2, B, Hkv, S)
    blk = torch.stack([ko.float() * vo.float(), ko.float()]).unflatten(-1, (seq // tile, tile)).amax(-1)  # (2, .., T)
    tiles = tok.unflatten(-1, (seq // tile, tile))
    if causal:
        own = tiles.cummax(-1).values.flatten(-2)
        earlier = torch.cat([torch.zeros_like(blk[..., :1]), blk.cummax(-1).values[..., :-1]], -1)
    else:
        own = tiles.amax(-1).repeat_interleave(tile, -1)
        earlier = blk.amax(-1, keepdim=True).expand_as(blk)
    own, earlier = (x.repeat_interleave(hq // hkv, 2) for x in (own, earlier.repeat_interleave(tile, -1)))
    bound = torch.maximum(f * own[0] + g * own[1], f * earlier[0] + g * earlier[1]) * (1.0 / 448.0)
    return pow2_at_least(bound)


def pow2_at_least(bound: torch.Tensor) -> torch.Tensor:
    """The smallest power of two >= bound where bound > 0 (1 elsewhere, NaN included; +Inf stays), from the fp32
    bits — exact where exp2(ceil(log2(bound))) can round log2 of a bound just above a power of two down to it — and
    at least 2^-126 (a subnormal bound takes the smallest normal power)."""
    bits = bound.float().contiguous().view(torch.int32)
    up = (((bits >> 23) + ((bits & 0x7FFFFF) != 0).to(torch.int32)) << 23).view(torch.float32)
    return torch.where(bound > 0, torch.where(bits >= 0x7F800000, bound, up), 1.0).contiguous()


def attention_keep(seq: int, causal: bool, doc_ids: torch.Tensor | None, device) -> torch.Tensor | None:
    """Which keys each query sees: None (all), bool [S, S] (causal) or [B, 1, S, S] (documents)."""
    if doc_ids is not None:
        return document_causal_mask(doc_ids, causal)
    if causal:
        return torch.ones(seq, seq, dtype=torch.bool, device=device).tril()
    return None


def _row_vmax(v_scale: torch.Tensor, seq_q: int, keep: torch.Tensor | None, safe: bool, tile: int) -> torch.Tensor:
    """r [..., Sq, Sk]: max of V's per-token scale over each key tile, over the keys row i sees when
    safe (leaky, or nothing masked: the whole tile), repeated over the tile's keys. A tile where the
    row sees no key gets r = 1 (its P is 0 there)."""
    if keep is None or not safe:
        vt = v_scale.unflatten(-1, (v_scale.shape[-1] // tile, tile))  # (..., T, tile)
        r = vt.amax(-1)[..., None, :].expand(*v_scale.shape[:-1], seq_q, vt.shape[-2])  # (..., Sq, T)
    else:
        seen = torch.where(keep, v_scale[..., None, :], 0.0)  # (..., Sq, Sk)
        r = seen.unflatten(-1, (seen.shape[-1] // tile, tile)).amax(-1)
        r = torch.where(r > 0, r, 1.0)
    return r.repeat_interleave(tile, dim=-1)


def same_tile(seq: int, tile: int, device) -> torch.Tensor:
    """bool [S, S]: query i and key j lie in the same kernel tile (the diagonal tiles)."""
    t = torch.arange(seq, device=device) // tile
    return t[:, None] == t[None, :]


def _scores(q: Operand, k_vals: torch.Tensor, k_scale: torch.Tensor, qs: torch.Tensor) -> torch.Tensor:
    """(q8 · k8ᵀ) · (s_q·c ⊗ s_k), fp32 [..., Sq, Sk]."""
    s = q.vals.float() @ k_vals.float().transpose(-1, -2)
    return s * (qs[..., :, None] * k_scale[..., None, :])


class _Probs:
    """The forward's probabilities, recomputed identically in the backward.

    Operands with an off-diagonal copy (`attention_operands.OffDiagonal`) use it for every
    pair (i, j) in different tiles and the per-token operand on the diagonal tiles; p carries
    P's fixed ×256 (p = exp2(s - M + 8)), and off the diagonal an off-copy V has no fold (r is
    its tile scale, x = p).
    """

    def __init__(self, ops: ForwardOperands, spec: AttentionSpec, causal: bool, safe: bool,
                 sm_scale: float, m: torch.Tensor | None = None, tile: int = SEQ_BLOCK, doc_ids=None):
        group = ops.q.vals.shape[1] // ops.k.vals.shape[1]
        self.kv = lambda t: t.repeat_interleave(group, dim=1)  # (B, Hkv, ...) -> (B, Hq, ...)
        seq = ops.q.vals.shape[-2]
        self.diag = same_tile(seq, tile, ops.q.vals.device)
        qs = ops.q.scale * (sm_scale * LOG2E)
        s = _scores(ops.q, self.kv(ops.k.vals), self.kv(ops.k.scale), qs)  # (B, H, Sq, Sk)
        if ops.k.off is not None:
            s_off = _scores(ops.q, self.kv(ops.k.off.rows()), self.kv(ops.k.off.per_token_scale()), qs)
            s = torch.where(self.diag, s, s_off)
        self.keep = attention_keep(seq, causal, doc_ids, s.device)
        if self.keep is not None:
            s = s.masked_fill(~self.keep, float("-inf"))
        self.m = s.amax(-1).ceil() if m is None else m
        m_use = torch.where(self.m == float("-inf"), 0.0, self.m)  # rows that see nothing: p = 0
        self.p = torch.exp2(s - (m_use - 8.0)[..., None])  # ×256
        self.vs = self.kv(ops.v.scale)
        self.r = _row_vmax(self.vs, seq, self.keep, safe, tile)
        x = self.p * self.vs[..., None, :] * (1.0 / self.r)
        # fold[i, j] = r / s_v[j]: what turns V's per-token-folded P back into a probability
        self.fold = self.r / self.vs[..., None, :]
        if ops.v.off is not None:
            vsb = self.kv(ops.v.off.per_token_scale())[..., None, :]
            self.r = torch.where(self.diag, self.r, vsb)
            x = torch.where(self.diag, x, self.p)
            self.fold = torch.where(self.diag, self.fold, 1.0)
        xq, prs = quant_rows(x * (1.0 / 256.0), spec.pv, fixed=True, tile=tile)
        self.xq, self.prs = xq, prs * 256.0

    def off_rows(self, op: Operand) -> torch.Tensor | None:
        """The off-diagonal copy's bytes [B, Hq, S, D] (GQA-expanded), or None without one."""
        return None if op.off is None else self.kv(op.off.rows())

    def pair_scale(self, op: Operand) -> torch.Tensor:
        """[..., Sq or 1, Sk]: the key-side scale each (query, key) pair used."""
        tok = self.kv(op.scale)[..., None, :]
        return tok if op.off is None else torch.where(self.diag, tok, self.kv(op.off.per_token_scale())[..., None, :])

    def split(self, a: torch.Tensor, vals: torch.Tensor, off_vals: torch.Tensor | None) -> torch.Tensor:
        """a [..., Sq, Sk] @ the key-side values, per-token bytes on the diagonal, off copy elsewhere."""
        if off_vals is None:
            return a @ vals.float()
        return (a * self.diag) @ vals.float() + (a * ~self.diag) @ off_vals.float()


def forward_math(ops: ForwardOperands, spec: AttentionSpec, causal: bool, safe: bool, sm_scale: float,
                 doc_ids: torch.Tensor | None = None):
    """(O fp32 [B, Hq, S, D], M, l [B, Hq, S]) from quantized operands; doc_ids [B, S] or None."""
    pr = _Probs(ops, spec, causal, safe, sm_scale, doc_ids=doc_ids)
    l = pr.p.sum(-1) * (1.0 / 256.0)
    o = pr.split(pr.xq * (pr.r * pr.prs), pr.kv(ops.v.vals), pr.off_rows(ops.v)) * (1.0 / 256.0) / l[..., None]
    return o, pr.m, l


def pack_stats(m: torch.Tensor, l: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row statistics as saved: lse2 = M + log2 l (fp32) and the int8 offset floor(lse2) - M.

    M is an integer and floor(lse2) - M lies in [-1, log2 S], so 5 bytes a row carry both
    M (exactly) and l (as exp2(lse2 - M)), where fp32 M and l would take 8.
    """
    lse2 = m + torch.log2(l)
    return lse2, (torch.floor(lse2) - m).to(torch.int8)


def unpack_stats(lse2: torch.Tensor, moff: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, 1 / l) from the saved row statistics, as the backward kernels compute them."""
    m = torch.floor(lse2) - moff.float()
    return m, torch.exp2(m - lse2)


def backward_math(ops: ForwardOperands, spec: AttentionSpec, do: Operand, delta, m, linv,
                  causal: bool, safe: bool, sm_scale: float, tile: int = SEQ_BLOCK, ds_tile: int = DS_TILE,
                  doc_ids: torch.Tensor | None = None, fp8_dk: bool = False, fp8_dq: bool | None = None):
    """(dQ, dK, dV) fp32 from the forward's operands, dO quantized per spec.do, M and 1/l. fp8_dq (default: the
    spec's dsk == "fp8"; given, the launch option's probe) and fp8_dk (the launch option's probe, fp8 spec, without
    documents): dQ, dK as one FP8 product each under `dq_row_scale`, `dk_row_scale`."""
    fp8_dq = spec.dsk == "fp8" if fp8_dq is None else fp8_dq
    pr = _Probs(ops, spec, causal, safe, sm_scale, m=m, tile=tile, doc_ids=doc_ids)
    hq, hkv = ops.q.vals.shape[1], ops.k.vals.shape[1]
    sum_groups = lambda t: t.unflatten(1, (hkv, hq // hkv)).sum(2)  # noqa: E731  (B, Hq, ...) -> (B, Hkv, ...)
    if spec.fp8_dv:  # one FP8 product: y = E4M3((p · (1/l · s_dO)) / τ) against dO's own bytes
        tau = dv_row_scale(do.scale, hkv, causal, None if doc_ids is None else doc_tables(doc_ids)[0])
        w = linv * do.scale
        y = F.quantize_fp8((pr.p * w[..., :, None]) * pr.kv(1.0 / tau)[..., None, :], torch.tensor(1.0)).float()
        dv = sum_groups(y.transpose(-1, -2) @ do.vals.float()) * (tau * (1.0 / 256.0))[..., None]
    else:  # the dequantized P the forward multiplied V by, P_ij = deq(x)_ij · fold_ij / (256 l_i)
        pdeq = pr.xq * pr.prs * pr.fold * (linv[..., None] * (1.0 / 256.0))
        dv = sum_groups(pdeq.transpose(-1, -2) @ do.dequant())
    # dS = P ∘ (dP - delta), P the unquantized softmax; dP against the V bytes each pair used.
    v_off = pr.off_rows(ops.v)
    dp = do.vals.float() @ pr.kv(ops.v.vals).float().transpose(-1, -2)
    if v_off is not None:
        dp = torch.where(pr.diag, dp, do.vals.float() @ v_off.float().transpose(-1, -2))
    dp = dp * (do.scale[..., :, None] * pr.pair_scale(ops.v))
    ds = (pr.p * (linv[..., None] * (1.0 / 256.0))) * (dp - delta[..., None])
    # dQ = Σ_j dS_ij k_j: each pair's K scale folded into dS before dS is quantized along keys.
    if fp8_dq:
        off = lambda op: None if op.off is None else op.off.per_token_scale()  # noqa: E731
        rho = dq_row_scale(do, delta, linv, ops.k.scale, off(ops.k), ops.v.scale, off(ops.v), causal, tile,
                           None if doc_ids is None else doc_tables(doc_ids)[0])
        y = F.quantize_fp8(ds * pr.pair_scale(ops.k) * (1.0 / rho)[..., None], torch.tensor(1.0)).float()
        dq = pr.split(y, pr.kv(ops.k.vals), pr.off_rows(ops.k)) * (rho * sm_scale)[..., None]
    else:
        yq, ys = quant_rows(ds * pr.pair_scale(ops.k), spec.ds, fixed=False, tile=ds_tile)
        dq = pr.split(yq * ys, pr.kv(ops.k.vals), pr.off_rows(ops.k)) * sm_scale
    if fp8_dk:
        rho = dk_row_scale(ops.q.scale, do, delta, linv, ops.v.scale,
                           None if ops.v.off is None else ops.v.off.per_token_scale(), causal, tile)
        y = F.quantize_fp8((ds * ops.q.scale[..., :, None]) * pr.kv(1.0 / rho)[..., None, :], torch.tensor(1.0))
        dk = sum_groups(y.float().transpose(-1, -2) @ ops.q.vals.float()) * (rho * sm_scale)[..., None]
        return dq, dk, dv
    yq, ys = quant_rows((ds * ops.q.scale[..., :, None]).transpose(-1, -2), spec.ds, fixed=False,
                        tile=ds_tile)
    dk = sum_groups((yq * ys) @ ops.q.vals.float()) * sm_scale
    return dq, dk, dv


def lse_from_saved(lse2: torch.Tensor) -> torch.Tensor:
    """Natural-log LSE of the scaled scores from the saved log2 one."""
    return lse2 / LOG2E


class _RefAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, spec, causal, safeguards, doc_ids):
        sm_scale = 1.0 / math.sqrt(q.shape[-1])
        ops = prepare_forward(q, k, v, spec, safeguards, F, SEQ_BLOCK, off_diagonal=doc_ids is None)
        o, m, l = forward_math(ops, spec, causal, safeguards, sm_scale, doc_ids)
        o = o.to(q.dtype)
        o_saved = _quantize_output(o, spec.do, F)
        ctx.save_for_backward(ops.q.vals, ops.q.scale, ops.k.vals, ops.k.scale, ops.v.vals, ops.v.scale,
                              o_saved.vals, o_saved.scale, doc_ids, *pack_stats(m, l))
        ctx.cfg = (spec, causal, safeguards, sm_scale, q.dtype)
        return o

    @staticmethod
    def backward(ctx, grad_o):
        qv, qs, kv, ks, vv, vs, ov, os_, doc_ids, lse2, moff = ctx.saved_tensors
        spec, causal, safeguards, sm_scale, dtype = ctx.cfg
        ops = ForwardOperands(Operand(qv, qs), Operand(kv, ks), Operand(vv, vs))
        if doc_ids is None:
            attach_off_diagonal(ops.k, ops.v, spec, safeguards, F, SEQ_BLOCK, v_transposed=False)
        do = quantize_operand(grad_o, spec.do, F)
        delta = backward_delta(do, Operand(ov, os_))
        m, linv = unpack_stats(lse2, moff)
        dq, dk, dv = backward_math(ops, spec, do, delta, m, linv, causal, safeguards, sm_scale, doc_ids=doc_ids)
        return dq.to(dtype), dk.to(dtype), dv.to(dtype), None, None, None, None


def _sdpa(q, k, v, causal: bool, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Plain attention (the bf16 spec): SDPA with GQA expansion; with doc_ids, a dense boolean
    document mask (`document.document_causal_mask`)."""
    if doc_ids is None:
        return TF.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])
    groups = q.shape[1] // k.shape[1]
    if groups > 1:  # explicit: not every SDPA backend that takes a mask takes enable_gqa
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    return TF.scaled_dot_product_attention(q, k, v, attn_mask=document_causal_mask(doc_ids, causal))


def attention(q, k, v, spec="fp8", causal: bool = True, safeguards: bool = True,
              doc_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Differentiable reference FLAMIA attention: q [B, Hq, S, D], k/v [B, Hkv, S, D] bf16 -> O bf16.

    doc_ids [B, S] (non-decreasing): attention stays inside each document. Inputs are assumed
    checked (`attention.check_inputs`, `document.check_doc_ids`); the bf16 spec is plain SDPA.
    """
    spec = AttentionSpec.parse(spec)
    if spec.is_bf16:
        return _sdpa(q, k, v, causal, doc_ids)
    return _RefAttention.apply(q, k, v, spec, causal, safeguards, doc_ids)


@torch.no_grad()
def attention_lse(q, k, v, spec="fp8", causal: bool = True, safeguards: bool = True, doc_ids=None):
    """(O bf16, LSE fp32 [B, Hq, S]) of the quantized forward, for the causal-safety tests."""
    spec = AttentionSpec.parse(spec)
    sm_scale = 1.0 / math.sqrt(q.shape[-1])
    ops = prepare_forward(q, k, v, spec, safeguards, F, SEQ_BLOCK, off_diagonal=doc_ids is None)
    o, m, l = forward_math(ops, spec, causal, safeguards, sm_scale, doc_ids)
    return o.to(q.dtype), lse_from_saved(pack_stats(m, l)[0])


def straight_through_attention(q, k, v, spec="fp8", causal: bool = True, safeguards: bool = True,
                               doc_ids: torch.Tensor | None = None):
    """The quantized forward as a differentiable PyTorch graph with straight-through quantizers.

    Same output value as `attention` (up to fp32 rounding); autograd through it is the
    gradient the explicit backward must reproduce when do = ds = bf16 (tested).
    """
    spec = AttentionSpec.parse(spec)
    sm_scale = 1.0 / math.sqrt(q.shape[-1])
    ops = prepare_forward(q.detach(), k.detach(), v.detach(), spec, safeguards, F, SEQ_BLOCK,
                          off_diagonal=doc_ids is None)
    with torch.no_grad():
        pr = _Probs(ops, spec, causal, safeguards, sm_scale, doc_ids=doc_ids)
        e_q = pr.xq * pr.prs * pr.fold * (1.0 / 256.0)  # the quantized numerator the forward used

    def st(x, deq):  # straight-through: forward value deq, gradient of x
        return x.float() + (deq - x.float()).detach()

    qt = st(q, ops.q.dequant())
    k_off = None if ops.k.off is None else pr.kv(st(k, ops.k.off.dequant()))  # off the diagonal
    v_off = None if ops.v.off is None else pr.kv(st(v, ops.v.off.dequant()))
    kt, vt = pr.kv(st(k, ops.k.dequant())), pr.kv(st(v, ops.v.dequant()))
    s = (qt @ kt.transpose(-1, -2)) * sm_scale
    if k_off is not None:
        s = torch.where(pr.diag, s, (qt @ k_off.transpose(-1, -2)) * sm_scale)
    if pr.keep is not None:
        s = s.masked_fill(~pr.keep, float("-inf"))
    e = torch.exp(s - pr.m[..., None] / LOG2E)
    e_st = e + (e_q - e).detach()
    o = (e_st * pr.diag) @ vt + (e_st * ~pr.diag) @ (vt if v_off is None else v_off)
    return o / e.sum(-1, keepdim=True)
