"""Triton pre-pass (flamia_kernels.quantize) vs the formats ground truth, and causal safety.

1. Bit-exactness: every Triton quantizer returns the same bytes and scales as
   `formats` (compared with torch.equal on uint8 views) over input families
   built to hit the traps: exact rounding ties, fp8 and fp32 subnormals,
   ×1e3 outliers, zero tokens and blocks, saturation, non-finite values.
2. FLAMIA.md causal-safety test 1 (quantizer prefix test) for every causal
   quantizer, in both implementations; and the same test catching the leak of
   a per-tensor scale and of a token-block scale with t inside the block.
On CPU the kernels run under TRITON_INTERPRET=1 (set by conftest.py).
"""
import math
import random

import pytest
import torch
from flamia_kernels import formats as F
from flamia_kernels import quantize as Q
from flamia_kernels._triton_env import can_run_triton
from test_formats import _e4m3_table, _gen, _nearest_even, _rne_probe_points  # brute-force rounding oracle

U8 = torch.uint8
E2M1_TIES = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])


# ---------------------------------------------------------------- quantizers under test


def _fp8_transposed(m, name, x, *args):
    """(x8, scale, x8 as [..., D, S]): the kernel writes it; for formats it is the plain transpose."""
    if m is Q:
        return getattr(Q, name)(x, *args, transposed=True)
    x8, scale = getattr(F, name)(x, *args)
    return x8, scale, x8.mT.contiguous()


def _nv(q: F.NVFP4Tensor):
    return q.codes, q.block_scale, q.global_scale


def _given_global(x):
    """A caller's global scale, off by 1e-3..2x: exercises block-scale and element saturation."""
    factor = torch.rand(x.shape[:-1] + (1,), generator=_gen(99)).to(x.device) * 2 + 1e-3
    return F.nvfp4_per_token_global_scale(x) * factor


def _key_side(m, x, transposed: bool):
    """Per-token fp8 + the off-diagonal token-block copy re-quantized from it (block 64)."""
    if m is Q:
        return Q.quantize_fp8_key_side(x, 64, transposed)
    x8, scale = F.quantize_fp8_per_token(x)
    xb8, bscale = F.requantize_fp8_token_blocks(x8, scale, 64)
    if transposed:
        x8, xb8 = x8.mT.contiguous(), xb8.mT.contiguous()
    return x8, scale[..., 0], xb8, bscale.reshape(*x.shape[:-2], x.shape[-2] // 64)


def _requant(m, x, transposed: bool):
    """Token-block copy re-derived from per-token bytes (the backward's path), block 64."""
    x8, scale = F.quantize_fp8_per_token(x)
    if m is Q:
        src = x8.mT.contiguous() if transposed else x8
        return Q.requantize_fp8_token_blocks(src, scale, 64, transposed=transposed)
    y8, bscale = F.requantize_fp8_token_blocks(x8, scale, 64)
    return (y8.mT.contiguous() if transposed else y8), bscale


QUANTIZERS = {
    "fp8_token": lambda m, x: _fp8_transposed(m, "quantize_fp8_per_token", x),
    "fp8_key_side": lambda m, x: _key_side(m, x, False),
    "fp8_key_side_t": lambda m, x: _key_side(m, x, True),
    "fp8_requant_t": lambda m, x: _requant(m, x, True),
    "fp8_block64": lambda m, x: _fp8_transposed(m, "quantize_fp8_token_blocks", x, 64),
    "mxfp8": lambda m, x: m.quantize_mxfp8(x),
    "nvfp4_tensor": lambda m, x: _nv(m.quantize_nvfp4(x)),
    "nvfp4_token": lambda m, x: _nv(m.quantize_nvfp4_per_token(x)),
    "nvfp4_given": lambda m, x: _nv(m.quantize_nvfp4(x, global_scale=_given_global(x))),
    "nvfp4_stochastic": lambda m, x: _nv(
        m.quantize_nvfp4_per_token(x, stochastic=True, generator=_gen(7, x.device))
    ),
}


def assert_same_bits(ref: tuple, got: tuple) -> None:
    assert len(ref) == len(got)
    for i, (a, b) in enumerate(zip(ref, got, strict=True)):
        assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, b.dtype, a.shape, b.shape)
        a, b = a.contiguous(), b.contiguous()
        if a.element_size() == 1:
            a, b = a.view(U8), b.view(U8)
        if not torch.equal(a, b):
            bad = (a != b).nonzero()
            raise AssertionError(f"output {i}: {len(bad)} mismatches, first at {bad[0].tolist()}")


# ---------------------------------------------------------------- input families


def _fp8_ties(shape, gen):
    """Scale 2^k exactly (amax 448·2^k every 16 elements), others on E4M3 midpoints: exact ties."""
    table = torch.arange(0, 0x7F, dtype=U8).view(F.FP8_DTYPE).float()
    mids = (table[1:] + table[:-1]) / 2  # incl. subnormal midpoints (odd multiples of 2^-10)
    pick = torch.randint(0, len(mids), shape, generator=gen)
    x = mids[pick]
    x[..., ::16] = 448.0
    sign = torch.randint(0, 2, shape, generator=gen) * 2 - 1
    return x * sign * 2.0**-5


def _nvfp4_ties(shape, gen):
    """Global 2^k (row amax 2688·2^k), E4M3 block scales, elements on E2M1 midpoints: exact ties."""
    n_blocks = shape[-1] // 16
    bs_codes = torch.randint(0x20, 0x7F, (*shape[:-1], n_blocks, 1), generator=gen, dtype=U8)
    bs = bs_codes.view(F.FP8_DTYPE).float()
    bs[..., 0, :] = 448.0
    elems = E2M1_TIES[torch.randint(0, len(E2M1_TIES), (*shape[:-1], n_blocks, 16), generator=gen)]
    elems[..., 0] = 6.0
    sign = torch.randint(0, 2, elems.shape, generator=gen) * 2 - 1
    return (elems * sign * bs * 2.0**-3).reshape(shape)


def make_input(family: str, shape, quantizer: str, seed: int) -> torch.Tensor:
    g = _gen(seed)
    x = torch.randn(shape, generator=g)
    if family == "normal":  # per-token magnitudes spread over 2^-8 .. 2^8
        return x * torch.exp2(torch.randint(-8, 9, (*shape[:-1], 1), generator=g).float())
    if family == "outliers":
        return torch.where(torch.rand(shape, generator=g) < 0.01, x * 1e3, x)
    if family == "ties":
        return _nvfp4_ties(shape, g) if quantizer.startswith("nvfp4") else _fp8_ties(shape, g)
    if family == "tiny":  # wide range inside tokens (fp8/E2M1 subnormals) and fp32-subnormal tokens
        x = x * torch.exp2(torch.randint(-24, 1, shape, generator=g).float())
        x[..., 1::3, :] *= 2.0**-128
        return x
    if family == "zeros":  # zero tokens and zero 16/32-element blocks
        x[..., ::5, :] = 0.0
        x[..., 32:64] = 0.0
        return x
    raise ValueError(family)


FAMILIES = ["normal", "outliers", "ties", "tiny", "zeros"]
SHAPES = [(3, 5, 192, 128), (1, 7, 384, 64), (2, 3, 64, 96), (5, 64, 64)]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", list(QUANTIZERS))
def test_triton_matches_formats_bit_for_bit(name, family):
    i = FAMILIES.index(family) + list(QUANTIZERS).index(name)
    shape = SHAPES[i % len(SHAPES)]
    x = make_input(family, shape, name, seed=i)
    if family in ("normal", "outliers") and i % 2:
        x = x.bfloat16()  # bf16 -> fp32 is exact; both paths must read it the same way
    assert can_run_triton(x)  # on CPU the conftest turned the interpreter on
    assert_same_bits(QUANTIZERS[name](F, x), QUANTIZERS[name](Q, x))


def test_triton_e4m3_rounding_on_every_grid_point_and_tie():
    """With amax = 448 (scale exactly 1) the kernel's bytes are the nearest-even E4M3 codes."""
    codes, table = _e4m3_table()
    probes = _rne_probe_points(table, seed=9)[: 35 * 63]  # all grid points and ties, then random
    probes = probes[torch.randperm(len(probes), generator=_gen(10))]
    signed = probes * (torch.randint(0, 2, probes.shape, generator=_gen(11)) * 2 - 1)
    x = torch.cat([torch.full((35, 1), 448.0), signed.view(35, 63)], dim=1)
    x8, scale = Q.quantize_fp8_per_token(x)
    assert (scale == 1.0).all()
    expect = _nearest_even(x.flatten().abs(), table, codes) | ((x.flatten() < 0).long() << 7)
    assert torch.equal(x8.view(U8).flatten().long(), expect)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # interpreter: Inf/Inf
@pytest.mark.parametrize("fmt", ["fp8", "mxfp8", "nvfp4"])
def test_triton_non_finite_groups_match_formats(fmt):
    x = torch.randn(2, 3, 64, 64, generator=_gen(3))
    x[0, 1, 5, 7] = float("nan")
    x[1, 2, 9, 40] = float("inf")
    x[1, 0, 63, 0] = -float("inf")
    if fmt == "fp8":
        ref, got = (F.dequantize_fp8(*m.quantize_fp8_per_token(x)) for m in (F, Q))
    elif fmt == "mxfp8":
        ref, got = (F.dequantize_mxfp8(*m.quantize_mxfp8(x)) for m in (F, Q))
    else:
        ref, got = (F.dequantize_nvfp4(m.quantize_nvfp4_per_token(x)) for m in (F, Q))
    assert torch.equal(ref.isnan(), got.isnan()) and ref.isnan().sum() >= 3 * 32
    finite = ~ref.isnan()
    assert torch.equal(ref[finite], got[finite])


def _key_side_values(out, transposed: bool):
    """fp32 [..., S, D] of the key side's per-token bytes and of its block-64 copy."""
    x8, scale, xb8, bscale = out
    if transposed:
        x8, xb8 = x8.mT, xb8.mT
    return F.dequantize_fp8(x8, scale[..., None]), F.dequantize_fp8_token_blocks(xb8, bscale[..., None, None])


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # interpreter: Inf/Inf
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("transposed", [False, True])
def test_key_side_non_finite_tiles(device, transposed):
    """The key-side kernel skips the E4M3 NaN fix on tiles without NaN or ±Inf: tiles holding one take
    the fixing branch, their neighbours the finite one; both agree with `formats` (NaN where it has
    NaN, the same values elsewhere), and the finite tiles' bytes and scales are bit-identical."""
    x = make_input("normal", (2, 3, 256, 64), "fp8_key_side", seed=41)  # 4 blocks of 64 tokens
    x[0, 1, 5, 7] = float("nan")
    x[1, 2, 70, 40] = float("inf")
    x[1, 0, 255, 0] = -float("inf")
    ref = _key_side(F, x, transposed)
    got = tuple(o.cpu() for o in _key_side(Q, x.to(device), transposed))
    for r, g in zip(_key_side_values(ref, transposed), _key_side_values(got, transposed), strict=True):
        assert torch.equal(r.isnan(), g.isnan()) and r.isnan().sum() >= 3 * 64
        assert torch.equal(r[~r.isnan()], g[~r.isnan()])
    blocks = x.unflatten(-2, (4, 64)).isfinite().flatten(-2).all(-1)  # (2, 3, 4): tiles without NaN/Inf
    assert 0 < blocks.sum() < blocks.numel()
    for r, g in zip(ref, got, strict=True):
        if r.shape == blocks.shape:  # the block scales
            r, g = r[blocks], g[blocks]
        else:  # bytes [..., S, D] (or [..., D, S]) and per-token scales [..., S], token by token
            tokens = blocks.repeat_interleave(64, dim=-1)
            r, g = (t.mT[tokens] if t.dim() == 4 and transposed else t[tokens] for t in (r, g))
        assert_same_bits((r,), (g,))


def test_non_power_of_two_token_block_falls_back_with_same_bits():
    x = torch.randn(2, 192, 64, generator=_gen(4))
    assert_same_bits(F.quantize_fp8_token_blocks(x, 48), Q.quantize_fp8_token_blocks(x, 48))


def test_without_triton_every_function_falls_back_to_formats(monkeypatch):
    """A CPU tensor without the interpreter (or no Triton at all) gets formats' bytes, same API."""
    monkeypatch.setattr(Q, "can_run_triton", lambda x: False)
    x = torch.randn(2, 3, 128, 64, generator=_gen(8))
    for fn in QUANTIZERS.values():
        assert_same_bits(fn(F, x), fn(Q, x))


def test_triton_rejects_bad_shapes_like_formats():
    with pytest.raises(ValueError, match="S = 100"):
        Q.quantize_fp8_token_blocks(torch.randn(2, 100, 64), 64)
    with pytest.raises(ValueError, match=r"head_dim\) = 72 .* block size 32"):
        Q.quantize_mxfp8(torch.randn(4, 72))
    with pytest.raises(ValueError, match=r"head_dim\) = 40 .* block size 16"):
        Q.quantize_nvfp4_per_token(torch.randn(4, 40))


# ---------------------------------------------------------------- causal safety (FLAMIA.md test 1)

S, BLOCK = 128, 64
T_VALUES = [0, 1, 15, 16, 31, 32, 63, 64, random.Random(0).randrange(S - 1)]


def perturb(x: torch.Tensor, t: int, how: str, seed: int):
    """(base, perturbed): the two inputs agree on tokens <= t."""
    g = _gen(seed)
    base, fut = x.clone(), x.clone()
    future = fut[..., t + 1 :, :]
    if how == "random":
        future.copy_(torch.randn(future.shape, generator=g))
    elif how == "outliers":  # token t+1 (same block as t unless t ends one) and 5% of the rest ×1e3
        future.mul_(torch.where(torch.rand(future.shape, generator=g) < 0.05, 1e3, 1.0))
        future[..., 0, :] *= 1e3
    elif how == "tiny_then_one":  # 2^-20 at t and after; then 1.0 arrives at t+1
        for y in (base, fut):
            y[..., t:, :] = torch.randn(y[..., t:, :].shape, generator=_gen(seed)) * 2.0**-20
        fut[..., t + 1, :] = 1.0
    return base, fut


def _prefix(outputs, layout, t):
    """Part of each output that tokens <= t own: layout[i] = (token axis, tokens per index) or None."""
    out = []
    for o, lay in zip(outputs, layout, strict=True):
        if lay is not None:
            axis, per = lay
            o = o.narrow(axis, 0, math.ceil((t + 1) / per))
        out.append(o.contiguous().view(U8) if o.element_size() == 1 else o)
    return out


def leaks(fn, layout, x, t, how) -> bool:
    base, fut = perturb(x, t, how, seed=t)
    a, b = _prefix(fn(base), layout, t), _prefix(fn(fut), layout, t)
    return not all(torch.equal(u, v) for u, v in zip(a, b, strict=True))


TOKEN = (-2, 1)
CAUSAL = {  # name: (quantizer, layout of its outputs)
    "fp8_token": (QUANTIZERS["fp8_token"], [TOKEN, TOKEN, (-1, 1)]),
    "mxfp8": (QUANTIZERS["mxfp8"], [TOKEN, TOKEN]),
    "nvfp4_token": (QUANTIZERS["nvfp4_token"], [TOKEN, TOKEN, TOKEN]),
}
PERTURBATIONS = ["random", "outliers", "tiny_then_one"]


@pytest.mark.parametrize("impl", ["formats", "triton"])
@pytest.mark.parametrize("name", list(CAUSAL))
def test_causal_quantizer_prefix_is_bit_identical(name, impl):
    fn, layout = CAUSAL[name]
    m = F if impl == "formats" else Q
    x = torch.randn(1, 3, S, 64, generator=_gen(5))
    for t in T_VALUES:
        for how in PERTURBATIONS:
            assert not leaks(lambda y: fn(m, y), layout, x, t, how), (name, impl, t, how)


def _per_tensor_fp8(x):
    scale = F.fp8_scale(x.abs().amax())
    return F.quantize_fp8(x, scale), scale


@pytest.mark.parametrize("t", T_VALUES)
def test_prefix_test_catches_leaky_quantizers(t):
    x = torch.randn(1, 3, S, 64, generator=_gen(6))
    # a current per-tensor amax leaks at every t (fp8 and NVFP4's default global scale)
    assert leaks(_per_tensor_fp8, [TOKEN, None], x, t, "outliers")
    assert leaks(lambda y: QUANTIZERS["nvfp4_tensor"](Q, y), [TOKEN, TOKEN, None], x, t, "outliers")
    # a token-block scale leaks when t sits inside its block, and is safe when t ends the block:
    # exactly why key-side block scales are fine off the diagonal and not on it
    block_fn = lambda y: QUANTIZERS["fp8_block64"](Q, y)
    block_layout = [TOKEN, (-3, BLOCK), (-1, 1)]
    inside = t % BLOCK != BLOCK - 1
    assert leaks(block_fn, block_layout, x, t, "outliers") == inside
    if inside:  # the 2^-20 at t is flushed once 1.0 shares its block (when t starts the block)
        expected = t % BLOCK == 0
        assert leaks(block_fn, block_layout, x, t, "tiny_then_one") == expected


# ---------------------------------------------------------------- GPU (lead runs: pytest -m gpu)


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", list(QUANTIZERS))
def test_gpu_triton_matches_formats_at_scale(name, family):
    shape = (4, 16, 4096, 128)  # 33.5M elements: a realistic attention operand
    x = make_input(family, shape, name, seed=11).cuda()
    if family in ("normal", "outliers"):
        x = x.bfloat16()
    got = QUANTIZERS[name](Q, x)
    assert_same_bits(QUANTIZERS[name](F, x), got)
    # and the CUDA result equals the CPU ground truth on a slice (no device-specific torch rounding)
    xs = x[:1, :2].contiguous()
    # (not for a whole-tensor amax, which a slice changes by design, nor for CPU vs CUDA noise draws)
    if name not in ("nvfp4_tensor", "nvfp4_stochastic"):
        ref_cpu = QUANTIZERS[name](F, xs.cpu())
        assert_same_bits(ref_cpu, tuple(o.cpu() for o in QUANTIZERS[name](Q, xs)))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("family", ["normal", "outliers", "zeros"])
def test_dO_quantizer_with_fused_delta(family, device):
    """The attention backward's fused pre-pass: dO's bytes and scales bit for bit as `formats`,
    and delta = rowsum(deq(dO) ∘ deq(O)) as the unfused PyTorch expression up to the sum's order."""
    from flamia_kernels.attention_operands import Operand, backward_delta

    shape = (2, 3, 192, 128)
    do = make_input(family, shape, "fp8_token", seed=21).bfloat16().to(device)
    o8, o_scale = F.quantize_fp8_per_token(make_input("normal", shape, "fp8_token", seed=22).to(device))
    x8, scale, delta = Q.quantize_fp8_per_token_with_delta(do, o8, o_scale[..., 0])
    ref8, ref_scale = F.quantize_fp8_per_token(do)
    assert_same_bits((ref8, ref_scale), (x8, scale))
    want = backward_delta(Operand(ref8, ref_scale[..., 0]), Operand(o8, o_scale[..., 0]))
    torch.testing.assert_close(delta, want, rtol=1e-5, atol=1e-6 * want.abs().max().item())
    # transposed (the FP8 dV product's B operand): the same bytes, scales and delta, plus the bytes as [D, S]
    x8b, scaleb, deltab, x8t = Q.quantize_fp8_per_token_with_delta(do, o8, o_scale[..., 0], transposed=True)
    assert_same_bits((x8, scale, delta), (x8b, scaleb, deltab))
    assert x8t.shape == (*shape[:-2], shape[-1], shape[-2]) and x8t.is_contiguous()
    assert torch.equal(x8t.view(torch.uint8), ref8.transpose(-1, -2).view(torch.uint8))
    # each token's Σ_d |E4M3 value| (ρ's ‖dO8_i‖₁, `dq_row_scale`): the bytes' own values, summed exactly here (at
    # most 128 × 448 in steps of 2^-9: 25 bits, within fp32's 24 only where the sum stays below 2^15, as here)
    *same, l1 = Q.quantize_fp8_per_token_with_delta(do, o8, o_scale[..., 0], transposed=True, row_l1=True)
    assert_same_bits((x8, scale, delta, x8t), tuple(same))
    want_l1 = ref8.double().abs().sum(-1)
    assert l1.shape == shape[:-1] and l1.dtype == torch.float32 and torch.equal(l1.double(), want_l1)
    if family != "zeros":
        assert (l1 > 0).all()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_prepass_launch_overrides_keep_the_bytes(device):
    """scripts/bench_prepass.py's launch variants (more warps, more tokens per program) change how the
    tiles are spread over threads and programs, never the bytes: each program's rows are independent."""
    x = make_input("outliers", (2, 3, 512, 128), "fp8_token", seed=31).bfloat16().to(device)
    base = Q.quantize_fp8_per_token(x, transposed=True)
    for launch in ({"rows": 128, "num_warps": 8}, {"rows": 64, "num_warps": 16}):
        assert_same_bits(base, Q.quantize_fp8_per_token(x, transposed=True, launch=launch))
    for transposed in (False, True):
        base = Q.quantize_fp8_key_side(x, 128, transposed)
        for warps in (4, 16):
            assert_same_bits(base, Q.quantize_fp8_key_side(x, 128, transposed, launch={"num_warps": warps}))


def test_prepass_launch_override_errors():
    x = torch.randn(1, 1, 256, 64).bfloat16()
    with pytest.raises(ValueError, match="pre-pass launch key 'rows': allowed num_warps"):
        Q.quantize_fp8_key_side(x, 128, launch={"rows": 64})
    with pytest.raises(ValueError, match="pre-pass launch num_warps=6: a power of two"):
        Q.quantize_fp8_per_token(x, launch={"num_warps": 6})


def bits(t: torch.Tensor) -> torch.Tensor:
    """A key-side pass's output as comparable bits: fp8 bytes as uint8, fp32 scales as int32 (NaN compares equal)."""
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t.view(torch.int32)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # interpreter: Inf/Inf
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("family", ["normal", "outliers", "tiny", "ties"])
def test_key_sides_in_one_launch_match_the_separate_passes(device, family):
    """`quantize_fp8_key_sides` (the forward's K and Vᵀ in one launch, programs alternating) writes the
    bytes and scales of `quantize_fp8_key_side` on each, NaN / ±Inf tiles included (compared as bits);
    prepare_forward takes it for fp8 K and Vᵀ with their copies."""
    if device == "cpu" and not can_run_triton(torch.empty(0)):
        pytest.skip("the Triton pass runs on the CPU under TRITON_INTERPRET=1 only")
    from flamia_kernels import AttentionSpec
    from flamia_kernels.attention_operands import prepare_forward

    k = make_input(family, (2, 3, 256, 64), "fp8_key_side", seed=47).to(device)
    v = make_input(family, (2, 3, 256, 64), "fp8_key_side", seed=53).to(device)
    k[0, 1, 5, 7], v[1, 2, 70, 40], v[1, 0, 255, 0] = float("nan"), float("inf"), -float("inf")
    got = Q.quantize_fp8_key_sides(k, v, 64)
    want = (Q.quantize_fp8_key_side(k, 64), Q.quantize_fp8_key_side(v, 64, transposed=True))
    for g, w in zip(got, want, strict=True):
        assert all(torch.equal(bits(a), bits(b)) for a, b in zip(g, w, strict=True))
    ops = prepare_forward(k, k, v, AttentionSpec.parse("fp8"), True, Q, 64, v_transposed=True)
    assert torch.equal(bits(ops.v.vals_t), bits(want[1][0])) and torch.equal(bits(ops.v.off.vals), bits(want[1][2]))
    assert torch.equal(bits(ops.k.off.scale), bits(want[0][3]))
    with pytest.raises(ValueError, match="must have one shape"):
        Q.quantize_fp8_key_sides(k, v[:, :2], 64)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # interpreter: Inf/Inf
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_key_sides_write_v_copy_in_p_register_order(device):
    """p_order: the same pass writes V's token-block copy with each 32 keys in `formats.p_register_order` (the
    sm_90 forward's P operand order) and every other output as before, bit for bit; prepare_forward marks the
    copy (`OffDiagonal.p_order`), whose `rows` are the key-order copy's; the leaky forward (no copy of its own)
    and a block that is not a multiple of 32 keep or refuse it."""
    if device == "cpu" and not can_run_triton(torch.empty(0)):
        pytest.skip("the Triton pass runs on the CPU under TRITON_INTERPRET=1 only")
    from flamia_kernels import AttentionSpec
    from flamia_kernels.attention_operands import prepare_forward

    k = make_input("outliers", (2, 3, 256, 64), "fp8_key_side", seed=61).to(device)
    v = make_input("outliers", (2, 3, 256, 64), "fp8_key_side", seed=67).to(device)
    v[1, 2, 70, 40] = float("nan")
    want = Q.quantize_fp8_key_sides(k, v, 64)
    got = Q.quantize_fp8_key_sides(k, v, 64, p_order=True)
    assert all(torch.equal(bits(a), bits(b)) for a, b in zip(got[0], want[0], strict=True))
    for i in (0, 1, 3):
        assert torch.equal(bits(got[1][i]), bits(want[1][i]))
    assert torch.equal(bits(got[1][2]), F.p_register_order(bits(want[1][2])))
    assert not torch.equal(bits(got[1][2]), bits(want[1][2]))
    spec = AttentionSpec.parse("fp8")
    ops = prepare_forward(k, k, v, spec, True, Q, 64, v_transposed=True, v_p_order=True)
    assert ops.v.off.p_order and torch.equal(bits(ops.v.off.vals), bits(got[1][2]))
    plain = prepare_forward(k, k, v, spec, True, Q, 64, v_transposed=True)
    assert not plain.v.off.p_order and torch.equal(bits(ops.v.off.rows()), bits(plain.v.off.rows()))
    ref = prepare_forward(k.cpu(), k.cpu(), v.cpu(), spec, True, F, 64, v_transposed=True, v_p_order=True)
    assert ref.v.off.p_order and torch.equal(bits(ref.v.off.vals), bits(got[1][2]).cpu())
    leaky = prepare_forward(k, k, v, spec, False, Q, 64, v_transposed=True, v_p_order=True)
    assert not leaky.v.off.p_order  # the leaky copy is the per-token operand itself: never reordered
    with pytest.raises(ValueError, match="p_order needs block \\(16\\) a multiple of 32"):
        Q.quantize_fp8_key_sides(k, v, 16, p_order=True)
