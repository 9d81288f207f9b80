"""reference.attention: its explicit backward is the straight-through gradient of its forward.

With do = ds = bf16 (nothing in the backward quantized beyond the forward's own operands),
the explicit backward must equal autograd through `straight_through_attention` (the same
quantized forward as a PyTorch graph with straight-through quantizers). Tolerance: relative
L2 <= 1e-2 on dQ, dK, dV (measured ~3e-3: the explicit backward rounds dS and dO·r/l to bf16
as the kernels do) and <= 3e-3 on O (bf16 output rounding).
"""
import pytest
import torch
from flamia_kernels import reference


def _inputs(seed, b=2, hq=4, hkv=2, s=256, d=64):
    gen = torch.Generator().manual_seed(seed)
    mk = lambda h: torch.randn(b, h, s, d, generator=gen).to(torch.bfloat16).requires_grad_(True)  # noqa: E731
    return mk(hq), mk(hkv), mk(hkv), torch.randn(b, hq, s, d, generator=gen).to(torch.bfloat16)


def _grads(fn, q, k, v, do, spec, **kw):
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    o = fn(q, k, v, spec, **kw)
    o.backward(do.to(o.dtype))
    return o.detach(), q.grad, k.grad, v.grad


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def _cos(a, b):
    return torch.nn.functional.cosine_similarity(a.float().flatten(), b.float().flatten(), dim=0).item()


ST_SPECS = ["qk=fp8,pv=fp8", "qk=mxfp8,pv=mxfp8", "qk=nvfp4,pv=nvfp4", "qk=fp8,pv=nvfp4"]


@pytest.mark.parametrize("spec", ST_SPECS)
@pytest.mark.parametrize("causal", [True, False])
def test_explicit_backward_is_straight_through_autograd(spec, causal):
    q, k, v, do = _inputs(seed=len(spec) + causal)
    got = _grads(reference.attention, q, k, v, do, spec, causal=causal)
    want = _grads(reference.straight_through_attention, q, k, v, do, spec, causal=causal)
    assert _rel(got[0], want[0]) <= 3e-3
    for name, a, b in zip(("dQ", "dK", "dV"), got[1:], want[1:], strict=True):
        assert _rel(a, b) <= 1e-2, f"{name}: {_rel(a, b):.2e}"


@pytest.mark.parametrize("spec,cos_o,cos_g", [("fp8", 0.997, 0.997), ("mxfp8", 0.997, 0.997),
                                              ("nvfp4-fp8", 0.99, 0.99), ("nvfp4", 0.98, 0.975)])
def test_accuracy_against_exact_attention(spec, cos_o, cos_g):
    """Quantized attention stays close to fp32 attention on N(0,1) inputs (figures: docs/kernels.md)."""
    q, k, v, do = _inputs(seed=1, b=1, hq=2, hkv=2, s=512)
    exact = _grads(lambda q, k, v, spec: reference.attention(q.float(), k.float(), v.float(), spec),
                   q, k, v, do, "bf16")
    got = _grads(reference.attention, q, k, v, do, spec)
    assert _cos(got[0], exact[0]) >= cos_o
    for a, b in zip(got[1:], exact[1:], strict=True):
        assert _cos(a, b) >= cos_g


def test_bf16_spec_is_plain_attention():
    q, k, v, _ = _inputs(seed=3)
    o = reference.attention(q, k, v, "bf16")
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True)
    torch.testing.assert_close(o, want)


def test_row_statistics_round_trip():
    """The saved (lse2, int8 offset) give back the integer max exactly, and 1/l to within the fp32
    rounding of lse2 (relative |lse2| * 2^-24 * ln 2 * 2: ~3e-5 at |M| = 300)."""
    gen = torch.Generator().manual_seed(4)
    m = torch.randint(-300, 300, (1000,), generator=gen).float()
    l = 0.5 + torch.rand(1000, generator=gen) * 8191
    lse2, moff = reference.pack_stats(m, l)
    m2, linv = reference.unpack_stats(lse2, moff)
    assert torch.equal(m2, m) and moff.dtype == torch.int8
    torch.testing.assert_close(linv, 1.0 / l, rtol=3e-5, atol=0)


def test_kernels_fixed_p_global_is_the_reference_value():
    """The kernels take P's NVFP4 global as a Python float computed once at import (a per-call
    `float(tensor)` broke torch.compile's graph at every attention call); it must stay the exact
    fp32 value of the reference's."""
    from flamia_kernels.attention_quant import p_global_value

    ref = reference.p_nvfp4_global()
    assert ref.dtype == torch.float32
    assert p_global_value() == ref.item()
    assert torch.tensor(p_global_value(), dtype=torch.float32) == ref


@pytest.mark.parametrize("causal", [True, False])
def test_dv_row_scale_is_the_largest_do_scale_among_the_queries_that_see_each_key(causal):
    """τ_j (`reference.dv_row_scale`, the FP8 dV product's row scale): the largest s_dO over the query heads of
    key j's K/V head and the queries that may see j (i >= j when causal, all otherwise; with documents, in j's
    document only), element by element."""
    gen = torch.Generator().manual_seed(7)
    sdo = torch.rand(2, 6, 40, generator=gen) * torch.logspace(-3, 2, 40)[torch.randperm(40, generator=gen)]
    tau = reference.dv_row_scale(sdo, 2, causal)
    assert tau.shape == (2, 2, 40)
    for b in range(2):
        for h in range(2):
            for j in range(40):
                seen = sdo[b, 3 * h:3 * h + 3, j if causal else 0:]
                assert tau[b, h, j] == seen.max(), (b, h, j)
    # with documents: only the queries of key j's document (a document's gradients are those of running it alone)
    from flamia_kernels.document import doc_tables

    ids = torch.tensor([[0] * 10 + [1] * 15 + [2] * 15, [5] * 40])
    tau = reference.dv_row_scale(sdo, 2, causal, doc_tables(ids)[0])
    assert torch.equal(tau[1], reference.dv_row_scale(sdo, 2, causal)[1])  # one document: as without
    pos = torch.arange(40)
    for b in range(2):
        for h in range(2):
            for j in range(40):
                sees = (ids[b] == ids[b, j]) & ((pos >= j) if causal else True)
                assert tau[b, h, j] == sdo[b, 3 * h:3 * h + 3][:, sees].max(), (b, h, j)


def test_fp8_dv_product_stays_within_fp8_rounding():
    """The fp8 preset's dV is one FP8 product (`AttentionSpec.fp8_dv`: P·s_dO re-quantized per key row against
    dO's own bytes): within fp8 rounding of the straight-through gradient of the same quantized forward (measured
    4.3–4.5e-2 relative L2, dO's own quantization included), and as close to exact attention as before (cosine
    0.9988 on these inputs; 0.9991 with dO in bf16)."""
    from flamia_kernels import AttentionSpec

    assert AttentionSpec.parse("fp8").fp8_dv and not AttentionSpec.parse("nvfp4-fp8").fp8_dv
    q, k, v, do = _inputs(seed=2)
    got = _grads(reference.attention, q, k, v, do, "fp8")
    want = _grads(reference.straight_through_attention, q, k, v, do, "fp8")
    exact = _grads(lambda q, k, v, spec: reference.attention(q.float(), k.float(), v.float(), spec),
                   q, k, v, do, "bf16")
    assert _rel(got[3], want[3]) <= 6e-2
    assert _cos(got[3], exact[3]) >= 0.998
