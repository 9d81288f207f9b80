"""`dv_row_scale.dv_row_scale_fast` (one Triton launch) against `reference.dv_row_scale` (PyTorch): the same bits,
on fresh random scales, under GQA, S not a multiple of the kernel's block, NaN and ±Inf propagated."""
import pytest
import torch
from flamia_kernels import reference
from flamia_kernels.dv_row_scale import BLOCK, dv_row_scale_fast


@pytest.mark.parametrize("b,hq,hkv,seq", [(2, 4, 4, 384), (1, 8, 2, BLOCK + 256), (2, 2, 1, 2 * BLOCK)])
def test_suffix_max_matches_the_reference(b, hq, hkv, seq):
    gen = torch.Generator().manual_seed(seq + hq)
    scale = torch.rand(b, hq, seq, generator=gen) * 10.0 ** torch.randint(-3, 3, (b, hq, seq), generator=gen)
    got = dv_row_scale_fast(scale, hkv, causal=True)
    want = reference.dv_row_scale(scale, hkv, causal=True)
    assert got.shape == want.shape == (b, hkv, seq)
    assert torch.equal(got, want)
    # a leaky variant (the max taken over every query, future ones included) differs: the test can tell
    assert not torch.equal(got, scale.reshape(b, hkv, -1).amax(-1, keepdim=True).expand(b, hkv, seq))


def test_suffix_max_propagates_nan_and_inf():
    scale = torch.rand(1, 2, 300)
    scale[0, 1, 200] = float("nan")
    scale[0, 0, 250] = float("inf")
    got = dv_row_scale_fast(scale, 1, causal=True)
    want = reference.dv_row_scale(scale, 1, causal=True)
    nan = got.isnan()
    assert torch.equal(nan, want.isnan()) and nan[0, 0, :201].all() and not nan[0, 0, 201:].any()
    assert torch.equal(got.nan_to_num(), want.nan_to_num())


def test_non_causal_and_documents_keep_the_reference():
    scale = torch.rand(1, 2, 256)
    assert torch.equal(dv_row_scale_fast(scale, 2, causal=False), reference.dv_row_scale(scale, 2, causal=False))
    doc = torch.zeros(1, 256, dtype=torch.int32)
    doc[:, 100:] = 1
    assert torch.equal(dv_row_scale_fast(scale, 2, True, doc), reference.dv_row_scale(scale, 2, True, doc))


@pytest.mark.gpu
@pytest.mark.parametrize("b,hq,hkv,seq", [(4, 16, 16, 8192), (2, 8, 2, 1920)])
def test_gpu_suffix_max_matches_the_reference(b, hq, hkv, seq):
    """The compiled kernel on CUDA, at the speed table's shape and under GQA."""
    gen = torch.Generator(device="cuda").manual_seed(seq)
    scale = torch.rand(b, hq, seq, device="cuda", generator=gen) * 10.0 ** torch.randint(
        -3, 3, (b, hq, seq), device="cuda", generator=gen)
    got = dv_row_scale_fast(scale, hkv, causal=True)
    want = reference.dv_row_scale(scale, hkv, causal=True)
    print(f"\ntau {b}x{hq}/{hkv}x{seq}: bit-identical {torch.equal(got, want)}")
    assert torch.equal(got, want)
