"""ρ for an FP8 dQ product (launch options ds_out with fp8_dq): `dq_row_scale.dq_row_scale_fast` (one Triton launch,
here under the interpreter) against `reference.dq_row_scale` from the same operands — equal bit for bit — with 1/ρ
written into the statistics' row the dK/dV kernel reads; and the power of two it rounds a bound up to."""
import pytest
import torch
from attention_saved import backward_args
from flamia_kernels import AttentionSpec, reference
from flamia_kernels import quantize as QZ
from flamia_kernels.attention_bwd_copies import bf16_copies, query_stats
from flamia_kernels.attention_bwd_gluon import DS_IRHO_ROW
from flamia_kernels.attention_operands import materialize_off_diagonal
from flamia_kernels.dq_row_scale import dq_row_scale_fast


def test_pow2_at_least_is_the_smallest_power_of_two_at_or_above():
    x = torch.tensor([1.0, 0.75, 1.0000001, 3.0, 2.0 ** -20, 2.0 ** -20 * 1.5, 448.0, 0.0, -2.0, float("nan"),
                      float("inf"), 1e-40])
    want = torch.tensor([1.0, 1.0, 2.0, 4.0, 2.0 ** -20, 2.0 ** -19, 512.0, 1.0, 1.0, 1.0, float("inf"), 2.0 ** -126])
    assert torch.equal(reference.pow2_at_least(x), want)
    # where log2 rounds: a bound one ulp above a power of two
    above = torch.nextafter(torch.tensor(2.0 ** -10), torch.tensor(1.0))
    assert reference.pow2_at_least(above).item() == 2.0 ** -9


@pytest.mark.parametrize("b,hq,hkv,seq", [(2, 4, 2, 384), (1, 2, 2, 256)])
def test_dq_row_scale_fast_matches_the_reference(b, hq, hkv, seq):
    spec = AttentionSpec.parse("fp8")
    gen = torch.Generator().manual_seed(seq + hq)
    mk = lambda h, s=1.0: (torch.randn(b, h, seq, 128, generator=gen) * s).to(torch.bfloat16)  # noqa: E731
    q, k, v, do = mk(hq), mk(hkv, 3.0), mk(hkv, 0.5), mk(hq, 1e-3)
    qo, ko, vo, doo, lse2, moff, delta = backward_args(spec, q, k, v, do)[:7]
    ko, vo = (materialize_off_diagonal(x, QZ) for x in (ko, vo))
    stats = query_stats(qo)
    bf16_copies(qo, ko, vo, doo, lse2, moff, delta, stats)
    rho = dq_row_scale_fast(doo, ko, vo, stats, DS_IRHO_ROW)
    linv = reference.unpack_stats(lse2, moff)[1]
    want = reference.dq_row_scale(doo, delta, linv, ko.scale, ko.off.per_token_scale(), vo.scale,
                                  vo.off.per_token_scale(), True)
    assert torch.equal(rho, want)
    assert torch.equal(stats.view(b, hq, -1, seq)[:, :, DS_IRHO_ROW], 1.0 / want)
    # a power of two a query, not one value for all: the bound varies along the sequence and over the heads
    assert torch.equal(rho, reference.pow2_at_least(rho)) and rho.unique().numel() > 2
    # with ‖dO8_i‖₁ from dO's pass (the autograd backward's route: that pass writes it, the launch skips dO's bytes)
    l1 = doo.vals.float().abs().sum(-1)
    stats[:, DS_IRHO_ROW] = 0.0
    assert torch.equal(dq_row_scale_fast(doo, ko, vo, stats, DS_IRHO_ROW, do_l1=l1), want)
    assert torch.equal(stats.view(b, hq, -1, seq)[:, :, DS_IRHO_ROW], 1.0 / want)
    # and it is what the launch reads: doubled, ρ follows it up (the bound's dO term grows)
    assert not torch.equal(dq_row_scale_fast(doo, ko, vo, stats, DS_IRHO_ROW, do_l1=l1 * 64), want)
    with pytest.raises(ValueError, match="do_l1"):
        dq_row_scale_fast(doo, ko, vo, stats, DS_IRHO_ROW, do_l1=l1[..., :-1])


def test_dq_row_scale_fast_falls_back_to_the_reference_where_it_has_no_kernel():
    """Without a causal mask (or without the copies) the launch does not apply: the reference's PyTorch computes ρ
    from the same statistics, and 1/ρ still lands in the statistics' row."""
    spec = AttentionSpec.parse("fp8")
    q, k, v, do = (torch.randn(1, 2, 256, 128, generator=torch.Generator().manual_seed(i)).to(torch.bfloat16)
                   for i in range(4))
    qo, ko, vo, doo, lse2, moff, delta = backward_args(spec, q, k, v, do, causal=False)[:7]
    ko, vo = (materialize_off_diagonal(x, QZ) for x in (ko, vo))
    stats = query_stats(qo)
    bf16_copies(qo, ko, vo, doo, lse2, moff, delta, stats)
    rho = dq_row_scale_fast(doo, ko, vo, stats, DS_IRHO_ROW, causal=False)
    want = reference.dq_row_scale(doo, delta, reference.unpack_stats(lse2, moff)[1], ko.scale,
                                  ko.off.per_token_scale(), vo.scale, vo.off.per_token_scale(), False)
    assert torch.equal(rho, want) and torch.equal(stats.view(1, 2, -1, 256)[:, :, DS_IRHO_ROW], 1.0 / want)
    causal = dq_row_scale_fast(doo, ko, vo, stats, DS_IRHO_ROW, causal=True)
    assert not torch.equal(causal, rho)  # the causal bound sees fewer keys
