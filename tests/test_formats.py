"""Ground-truth formats (flamia_kernels.formats): rounding, scales, error bounds, edge cases.

Each rounding rule is checked against an independent brute-force nearest-value
search over the format's whole code table, so a wrong tie rule or an
off-by-one exponent cannot hide behind a self-consistent implementation.
"""
import math

import pytest
import torch
from flamia_kernels import formats as F

E2M1_SET = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0}


def _gen(seed: int, device="cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _nearest_even(v: torch.Tensor, table: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """Brute force: code of the table value nearest to each v (ties -> even code), v >= 0."""
    dist = (v.double()[:, None] - table.double()[None, :]).abs()
    best = dist.min(dim=1, keepdim=True).values
    tied = dist == best
    even = tied & (codes[None, :] % 2 == 0)
    pick = torch.where(even.any(dim=1, keepdim=True), even, tied)
    return codes[pick.float().argmax(dim=1)]


def _e4m3_table():
    codes = torch.arange(0, 0x7F)  # non-negative finite codes 0..126
    return codes, codes.to(torch.uint8).view(F.FP8_DTYPE).float()


def _rne_probe_points(table: torch.Tensor, seed: int) -> torch.Tensor:
    """Every grid point, every midpoint (the ties), and random points in between."""
    mids = (table[1:] + table[:-1]) / 2
    rand = torch.rand(4096, generator=_gen(seed)) * table.max()
    return torch.cat([table, mids, rand])


# ---------------------------------------------------------------- fp8


def test_fp8_cast_is_round_nearest_even_and_saturating():
    codes, table = _e4m3_table()
    v = _rne_probe_points(table, 0)
    got = F.quantize_fp8(v, torch.tensor(1.0)).view(torch.uint8).long()
    assert torch.equal(got, _nearest_even(v, table, codes))
    over = torch.tensor([448.0, 449.0, 470.0, 1e6, float("inf")])
    assert F.quantize_fp8(torch.cat([over, -over]), torch.tensor(1.0)).float().abs().eq(448.0).all()


def test_fp8_per_token_scale_and_round_trip_error():
    x = torch.randn(2, 3, 96, 64, generator=_gen(1)) * torch.rand(2, 3, 96, 1, generator=_gen(2)) * 50
    x8, scale = F.quantize_fp8_per_token(x)
    assert x8.dtype == F.FP8_DTYPE and scale.dtype == torch.float32 and scale.shape == (2, 3, 96, 1)
    assert torch.equal(scale, x.abs().amax(-1, keepdim=True) / 448.0)
    assert torch.equal(x8.float().abs().amax(-1), torch.full((2, 3, 96), 448.0))  # amax lands on 448
    err = (F.dequantize_fp8(x8, scale) - x).abs()
    normal = x.abs() >= scale * 2.0**-6  # E4M3 normal range: relative error <= half an ulp = 2^-4
    assert (err[normal] <= x.abs()[normal] * 2.0**-4).all()
    assert (err[~normal] <= scale.expand_as(x)[~normal] * 2.0**-10).all()  # subnormal: half of 2^-9
    rel_l2 = (err.norm() / x.norm()).item()
    assert 0.01 < rel_l2 < 0.035, rel_l2


def test_fp8_zero_token_gets_tiny_scale():
    x = torch.randn(4, 64, generator=_gen(3))
    x[1] = 0.0
    x8, scale = F.quantize_fp8_per_token(x)
    assert scale[1].item() == (torch.tensor(F.FP8_TINY) / 448.0).item() > 0
    assert (x8[1].float() == 0).all() and (F.dequantize_fp8(x8, scale)[1] == 0).all()


def test_fp8_token_blocks_scale_and_shape():
    x = torch.randn(3, 192, 64, generator=_gen(4))
    x8, scale = F.quantize_fp8_token_blocks(x, 64)
    assert scale.shape == (3, 3, 1, 1)
    per_token_scale = F.quantize_fp8_per_token(x)[1]
    assert torch.equal(scale.flatten(), per_token_scale.view(3, 3, 64).amax(-1).flatten())
    rel = (F.dequantize_fp8_token_blocks(x8, scale) - x).norm() / x.norm()
    assert rel < 0.05
    # block of one token is the per-token quantizer, byte for byte
    one8, one_scale = F.quantize_fp8_token_blocks(x, 1)
    assert torch.equal(one8.view(torch.uint8), F.quantize_fp8_per_token(x)[0].view(torch.uint8))
    assert torch.equal(one_scale.flatten(), per_token_scale.flatten())


def test_fp8_token_blocks_rejects_ragged_sequence():
    with pytest.raises(ValueError, match=r"S = 100 .* block size 64"):
        F.quantize_fp8_token_blocks(torch.randn(2, 100, 64), 64)


# ---------------------------------------------------------------- mxfp8


def test_mx_exponent_hand_example_rounds_up():
    # amax 500 = 1.95 * 2^8: floor(log2) would give 2^0 and saturate 500 -> 448; rounded up: 2^1.
    x = torch.zeros(32)
    x[:4] = torch.tensor([500.0, -150.0, 1.0, 449.0])
    x8, code = F.quantize_mxfp8(x)
    assert code.tolist() == [127 + 1]
    # /2: 250 -> 256 (step 16 in [128, 256)), 75 -> 72 (step 8 in [64, 128)), 0.5 exact, 224.5 -> 224
    assert x8.float()[:4].tolist() == [256.0, -72.0, 0.5, 224.0]
    assert F.dequantize_mxfp8(x8, code)[:4].tolist() == [512.0, -144.0, 1.0, 448.0]
    amaxes = torch.tensor([448.0, 449.0, 1.0, 896.0, 0.0, 2.0**-130])
    assert F.mx_exponent(amaxes).tolist() == [127, 128, 119, 128, 0, 0]


def test_mx_exponent_is_the_smallest_that_does_not_saturate():
    octaves = torch.randint(-100, 100, (20000,), generator=_gen(5)).float()
    amax = torch.rand(20000, generator=_gen(5)) * torch.exp2(octaves)
    e = F.mx_exponent(amax).double() - 127
    a = amax.double()
    assert (a / torch.exp2(e) <= 448).all()
    assert (a / torch.exp2(e - 1) > 448).all()


def test_mxfp8_round_trip_and_shapes():
    x = torch.randn(3, 7, 128, generator=_gen(6)) * 10
    x8, code = F.quantize_mxfp8(x)
    assert x8.shape == x.shape and code.shape == (3, 7, 4) and code.dtype == torch.uint8
    assert x8.float().abs().max() <= 448.0
    err = (F.dequantize_mxfp8(x8, code) - x).abs()
    scale = F.e8m0_to_float(code).repeat_interleave(32, dim=-1)
    normal = x.abs() >= scale * 2.0**-6
    assert (err[normal] <= x.abs()[normal] * 2.0**-4).all()
    assert (err[~normal] <= scale[~normal] * 2.0**-10).all()
    assert (err.norm() / x.norm()) < 0.04


# ---------------------------------------------------------------- nvfp4


def test_e2m1_values_are_exactly_the_format_grid():
    codes = torch.arange(16, dtype=torch.uint8)
    values = F.e2m1_to_float(codes)
    assert set(values.abs().tolist()) == E2M1_SET and (values[8:] <= 0).all()
    x = torch.randn(4, 256, generator=_gen(7)) * 3
    q = F.quantize_nvfp4_per_token(x)
    on_grid = F.e2m1_to_float(F.unpack_nibbles(q.codes)).abs()
    assert set(on_grid.unique().tolist()) <= E2M1_SET and len(on_grid.unique()) == 8


def test_e2m1_rounding_is_nearest_even_and_saturating():
    table = torch.tensor(F.E2M1_VALUES)
    v = _rne_probe_points(table, 8)
    assert torch.equal(F.e2m1_codes(v).long(), _nearest_even(v, table, torch.arange(8)))
    assert F.e2m1_codes(torch.tensor([7.0, 1e9, float("inf"), -7.0])).tolist() == [7, 7, 7, 15]


def test_nibble_packing_round_trips_low_nibble_first():
    codes = torch.randint(0, 16, (5, 32), generator=_gen(9), dtype=torch.uint8)
    packed = F.pack_nibbles(codes)
    assert packed.shape == (5, 16) and torch.equal(packed[:, 0] & 0xF, codes[:, 0])
    assert torch.equal(F.unpack_nibbles(packed), codes)


def test_nvfp4_two_level_scales_and_round_trip():
    x = torch.randn(2, 64, 128, generator=_gen(10))
    q = F.quantize_nvfp4(x)
    assert q.codes.shape == (2, 64, 64) and q.block_scale.shape == (2, 64, 8)
    assert q.block_scale.dtype == F.FP8_DTYPE and q.global_scale.shape == (1, 1, 1)
    assert torch.equal(q.global_scale.flatten(), (x.abs().max() / 2688.0).flatten())
    assert q.shape == x.shape
    qt = F.quantize_nvfp4_per_token(x)
    assert qt.global_scale.shape == (2, 64, 1)
    for quant in (q, qt):
        rel = ((F.dequantize_nvfp4(quant) - x).norm() / x.norm()).item()
        assert 0.05 < rel < 0.12, rel


def test_nvfp4_zero_block_and_saturating_global():
    x = torch.randn(3, 64, generator=_gen(11))
    x[0, 16:32] = 0.0
    x[1] = 0.0
    q = F.quantize_nvfp4_per_token(x)
    deq = F.dequantize_nvfp4(q)
    assert (deq[0, 16:32] == 0).all() and (deq[1] == 0).all() and torch.isfinite(deq).all()
    # A global scale far too small saturates block scales at 448 and elements at 6: no NaN, no Inf.
    small = F.quantize_nvfp4(x, global_scale=torch.full((3, 1), 1e-6))
    assert small.block_scale[2].float().eq(448.0).all()
    assert F.dequantize_nvfp4(small)[2].abs().max().item() == pytest.approx(6 * 448 * 1e-6)


def test_nvfp4_stochastic_rounding_is_unbiased():
    draws, dim = 4096, 64
    row = torch.randn(dim, generator=_gen(12))
    x = row.expand(draws, dim).contiguous()  # same token, many independent roundings
    gs = F.nvfp4_per_token_global_scale(x)
    q = F.quantize_nvfp4(x, global_scale=gs, stochastic=True, generator=_gen(13))
    unit = (q.block_scale[0].float() * gs[0]).repeat_interleave(16)  # one E2M1 unit per element
    inside = (row / unit).abs() <= 6.0  # saturated elements round down by design
    mean_err = ((F.dequantize_nvfp4(q).mean(0) - row) / unit)[inside]
    assert mean_err.abs().max() < 0.1  # std of a mean of 4096 roundings (step <= 2) <= 1/64
    nearest_err = ((F.dequantize_nvfp4(F.quantize_nvfp4(row, global_scale=gs[0])) - row) / unit)[inside]
    assert nearest_err.abs().max() > 0.2  # rounding to nearest is biased: the test can fail


def test_nvfp4_stochastic_reproducible_by_generator():
    x = torch.randn(8, 64, generator=_gen(14))
    a = F.quantize_nvfp4_per_token(x, stochastic=True, generator=_gen(1))
    b = F.quantize_nvfp4_per_token(x, stochastic=True, generator=_gen(1))
    c = F.quantize_nvfp4_per_token(x, stochastic=True, generator=_gen(2))
    assert torch.equal(a.codes, b.codes) and not torch.equal(a.codes, c.codes)


# ---------------------------------------------------------------- shared rules


@pytest.mark.parametrize(
    "quantize, block",
    [(F.quantize_mxfp8, 32), (F.quantize_nvfp4, 16), (F.quantize_nvfp4_per_token, 16)],
)
def test_last_dim_not_multiple_of_block_is_rejected(quantize, block):
    with pytest.raises(ValueError, match=rf"head_dim\) = 72 .* block size {block}"):
        quantize(torch.randn(4, 72))


@pytest.mark.parametrize("fmt", ["fp8", "mxfp8", "nvfp4"])
def test_non_finite_token_dequantizes_to_nan_and_spares_the_others(fmt):
    x = torch.randn(4, 64, generator=_gen(15))
    clean = F.fake_quantize(x, fmt)
    for bad in (float("nan"), float("inf"), -float("inf")):
        y = x.clone()
        y[2, 5] = bad
        out = F.fake_quantize(y, fmt)
        group = slice(0, 32) if fmt == "mxfp8" else slice(None)  # MX: only that 32-block
        assert out[2, group].isnan().all()
        keep = torch.ones_like(x, dtype=torch.bool)
        keep[2, group] = False
        assert torch.equal(out[keep], clean[keep])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp8", "nvfp4"])
def test_fake_quantize_keeps_dtype_and_bounds_the_error(fmt, dtype):
    x = torch.randn(2, 4, 32, 64, generator=_gen(16)).to(dtype)
    y = F.fake_quantize(x, fmt)
    assert y.dtype == dtype and y.shape == x.shape
    if fmt == "bf16":
        assert y is x
        return
    rel = ((y.float() - x.float()).norm() / x.float().norm()).item()
    assert 0.005 < rel < {"fp8": 0.035, "mxfp8": 0.04, "nvfp4": 0.12}[fmt], rel
    if fmt == "mxfp8":  # power-of-two scales: the grid is exact in fp32 and bf16, so it is a fixed point
        assert torch.equal(F.fake_quantize(y, fmt), y)


def test_fake_quantize_unknown_format_names_the_allowed_ones():
    with pytest.raises(ValueError, match=r"'fp4'.*bf16, fp8, mxfp8, nvfp4"):
        F.fake_quantize(torch.randn(2, 32), "fp4")


def test_constants():
    assert F.FP8_MAX == 448.0 and F.E2M1_MAX == 6.0
    assert torch.finfo(F.FP8_DTYPE).max == F.FP8_MAX
    assert math.log2(F.FP8_TINY).is_integer() and (F.FP8_TINY / F.FP8_MAX) ** 2 > torch.finfo().tiny


def test_p_register_order_puts_each_threads_key_pairs_side_by_side():
    """`p_register_order` stores, within each chunk of 32 keys, the pairs a thread of the scores' accumulator
    holds (2q, 2q + 1, 8 + 2q, 9 + 2q and the same 16 further) at the four consecutive positions 4q.. of the fp8
    operand; `inverse` undoes it; only the last axis moves and a ragged axis is refused."""
    x = torch.arange(2 * 64).reshape(2, 64)
    y = F.p_register_order(x)
    for q in range(4):
        for h in range(2):
            assert y[0, 16 * h + 4 * q: 16 * h + 4 * q + 4].tolist() == [16 * h + 2 * q + j for j in (0, 1, 8, 9)]
    assert torch.equal(y[:, 32:] - 32, y[:, :32]) and torch.equal(y[1] - 64, y[0])
    assert sorted(y[0].tolist()) == list(range(64)) and not torch.equal(y, x)
    assert torch.equal(F.p_register_order(y, inverse=True), x)
    with pytest.raises(ValueError, match="last axis \\(48\\) must be a multiple of 32"):
        F.p_register_order(torch.zeros(3, 48))
