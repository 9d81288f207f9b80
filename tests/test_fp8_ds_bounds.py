"""The FP8 dK and dQ products' bound scales (`reference.dk_row_scale`, `reference.dq_row_scale`; launch options
fp8_dk, fp8_dq): a bound on every entry the product quantizes, causally safe, and as accurate as the ideal per-row
amax would be.

Gluon has no interpreter: the kernel side (`attention_dkdv_ws` with FP8_DK, `attention_bwd_gluon`'s dQ with FP8_DQ)
is compiled on the CPU by scripts/kernel_registers.py and run on the H200 by scripts/ds_fp8_probe.py, which
compares it to this math."""
from __future__ import annotations

import math

import pytest
import torch
from attention_saved import reference_backward_inputs
from flamia_kernels import formats as F
from flamia_kernels import reference as R
from flamia_kernels.spec import SEQ_BLOCK, AttentionSpec

SPEC = AttentionSpec.parse("fp8")


def _backward_inputs(q, k, v, do, causal=True):
    """What the backward kernels get: the forward's operands (token-block copies attached), dO's bytes, delta, M and
    1/l from the saved statistics, the recomputed probabilities, dS."""
    sm = 1.0 / math.sqrt(q.shape[-1])
    return (*reference_backward_inputs(SPEC, q, k, v, do, sm, causal, block=SEQ_BLOCK), sm)


def _ds(ops, do8, delta, m, linv, sm, causal=True, fold="q"):
    """dS_ij times s_q[i] (fold "q", dK's A operand) or the pair's s_k (fold "k", dQ's) as the kernels form it (fp32
    [B, Hq, S, S]), which pairs are seen, and the probabilities."""
    pr = R._Probs(ops, SPEC, causal, True, sm, m=m)
    v_off = pr.off_rows(ops.v)
    dp = do8.vals.float() @ pr.kv(ops.v.vals).float().transpose(-1, -2)
    dp = torch.where(pr.diag, dp, do8.vals.float() @ v_off.float().transpose(-1, -2))
    dp = dp * (do8.scale[..., :, None] * pr.pair_scale(ops.v))
    ds = (pr.p * (linv[..., None] / 256.0)) * (dp - delta[..., None])
    keep = pr.keep if pr.keep is not None else torch.ones_like(ds, dtype=torch.bool)
    return ds * (ops.q.scale[..., :, None] if fold == "q" else pr.pair_scale(ops.k)), keep, pr


def _rho(ops, do8, delta, linv, causal=True):
    return R.dk_row_scale(ops.q.scale, do8, delta, linv, ops.v.scale, ops.v.off.per_token_scale(), causal)


def _rho_q(ops, do8, delta, linv, causal=True):
    return R.dq_row_scale(do8, delta, linv, ops.k.scale, ops.k.off.per_token_scale(), ops.v.scale,
                          ops.v.off.per_token_scale(), causal)


def _inputs(seed, b=1, hq=4, hkv=2, s=512, d=128, outlier=False):
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(b, h, s, d, generator=g) for h in (hq, hkv, hkv, hq))
    if outlier:  # a few huge tokens: the scales then span many binades
        q[..., 7, :] *= 1e3
        v[..., 300, :] *= 1e3
        do[..., 100, :] *= 1e3
    return tuple(x.to(torch.bfloat16) for x in (q, k, v, do))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("outlier", [False, True])
def test_dk_row_scale_bounds_every_seen_entry(causal, outlier):
    ops, do8, delta, m, linv, sm = _backward_inputs(*_inputs(1, outlier=outlier), causal=causal)
    a, keep, pr = _ds(ops, do8, delta, m, linv, sm, causal)
    rho = _rho(ops, do8, delta, linv, causal)
    assert torch.equal(rho, torch.exp2(torch.log2(rho).round())), "ρ must be a power of two (exact scaling)"
    ratio = torch.where(keep, a.abs(), 0.0) / pr.kv(rho)[..., None, :]
    assert ratio.max() <= 448.0, "E4M3(dS·s_q/ρ) would saturate"
    assert ratio.max() > 0.1, "a bound so loose that the row's values would sit in E4M3's subnormals"


def test_dk_row_scale_is_causally_safe():
    """FLAMIA test 3's setting: dO zero past t, the future's Q, K, V changed: ρ of the keys up to t is unchanged."""
    t = 200
    q, k, v, do = _inputs(2)
    do[..., t + 1:, :] = 0
    rhos = []
    for seed in (3, 4):
        g = torch.Generator().manual_seed(seed)
        qf, kf, vf = (x.clone() for x in (q, k, v))
        for x in (qf, kf, vf):
            x[..., t + 1:, :] = (torch.randn(x[..., t + 1:, :].shape, generator=g) * 1e3).to(x.dtype)
        ops, do8, delta, m, linv, sm = _backward_inputs(qf, kf, vf, do)
        rhos.append(_rho(ops, do8, delta, linv))
    assert torch.equal(rhos[0][..., :t + 1], rhos[1][..., :t + 1])


def _cos(a, b):
    return torch.nn.functional.cosine_similarity(a.flatten().double(), b.flatten().double(), dim=0).item()


def _rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def test_fp8_dk_accuracy_matches_the_ideal_amax_scale():
    """Against fp32 attention: the bound-scaled FP8 dK is as close as dS in E4M3 under each key's exact amax would be
    (measured 0.0688 / 0.0687 at S = 2048 on the CPU), and within 12% of the bf16-dS dK's error."""
    q, k, v, do = _inputs(5, hq=2, hkv=2, s=1024)
    qq, kk, vv = (x.float().requires_grad_() for x in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=True).backward(do.float())
    exact = kk.grad
    ops, do8, delta, m, linv, sm = _backward_inputs(q, k, v, do)
    _, dk_bf16, _ = R.backward_math(ops, SPEC, do8, delta, m, linv, True, True, sm)
    _, dk_fp8, _ = R.backward_math(ops, SPEC, do8, delta, m, linv, True, True, sm, fp8_dk=True)
    a, keep, pr = _ds(ops, do8, delta, m, linv, sm)
    amax = torch.where(keep, a.abs(), 0.0).amax(-2)
    ideal = torch.where(amax > 0, torch.exp2(torch.ceil(torch.log2(amax / 448.0))), 1.0)
    y = F.quantize_fp8(a / ideal[..., None, :], torch.tensor(1.0)).float()
    dk_ideal = (y.transpose(-1, -2) @ ops.q.vals.float()) * (ideal * sm)[..., None]
    assert _rel(dk_fp8, exact) <= 1.02 * _rel(dk_ideal, exact)
    assert _rel(dk_fp8, exact) <= 1.12 * _rel(dk_bf16, exact)
    assert _cos(dk_fp8, exact) >= 0.99


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("outlier", [False, True])
def test_dq_row_scale_bounds_every_seen_entry(causal, outlier):
    ops, do8, delta, m, linv, sm = _backward_inputs(*_inputs(6, outlier=outlier), causal=causal)
    a, keep, _ = _ds(ops, do8, delta, m, linv, sm, causal, fold="k")
    rho = _rho_q(ops, do8, delta, linv, causal)
    assert torch.equal(rho, torch.exp2(torch.log2(rho).round())), "ρ must be a power of two (exact scaling)"
    ratio = torch.where(keep, a.abs(), 0.0) / rho[..., :, None]
    assert ratio.max() <= 448.0, "E4M3(dS·s_k/ρ) would saturate"
    assert ratio.max() > 0.1, "a bound so loose that the row's values would sit in E4M3's subnormals"


def test_dq_row_scale_is_causally_safe():
    """ρ of the queries up to t depends on the keys, values and dO up to t only (FLAMIA test 3's future changed)."""
    t = 200
    q, k, v, do = _inputs(7)
    rhos = []
    for seed in (8, 9):
        g = torch.Generator().manual_seed(seed)
        xs = [x.clone() for x in (q, k, v, do)]
        for x in xs:
            x[..., t + 1:, :] = (torch.randn(x[..., t + 1:, :].shape, generator=g) * 1e3).to(x.dtype)
        ops, do8, delta, m, linv, sm = _backward_inputs(*xs)
        rhos.append(_rho_q(ops, do8, delta, linv))
    assert torch.equal(rhos[0][..., :t + 1], rhos[1][..., :t + 1])


def test_fp8_dq_accuracy_matches_the_ideal_amax_scale():
    """As the dK test: the bound-scaled FP8 dQ against fp32 attention, the exact per-query amax, and bf16 dS."""
    q, k, v, do = _inputs(10, hq=2, hkv=2, s=1024)
    qq, kk, vv = (x.float().requires_grad_() for x in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=True).backward(do.float())
    exact = qq.grad
    ops, do8, delta, m, linv, sm = _backward_inputs(q, k, v, do)
    dq_bf16, _, _ = R.backward_math(ops, SPEC, do8, delta, m, linv, True, True, sm, fp8_dq=False)
    dq_fp8, _, _ = R.backward_math(ops, SPEC, do8, delta, m, linv, True, True, sm, fp8_dq=True)
    a, keep, pr = _ds(ops, do8, delta, m, linv, sm, fold="k")
    amax = torch.where(keep, a.abs(), 0.0).amax(-1)
    ideal = torch.where(amax > 0, torch.exp2(torch.ceil(torch.log2(amax / 448.0))), 1.0)
    y = F.quantize_fp8(a / ideal[..., None], torch.tensor(1.0)).float()
    dq_ideal = pr.split(y, pr.kv(ops.k.vals), pr.off_rows(ops.k)) * (ideal * sm)[..., None]
    assert _rel(dq_fp8, exact) <= 1.02 * _rel(dq_ideal, exact)
    assert _rel(dq_fp8, exact) <= 1.12 * _rel(dq_bf16, exact)
    assert _cos(dq_fp8, exact) >= 0.99
