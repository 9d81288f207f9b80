"""The fp8 pre-pass's division by a shared scale (`quantize._div_by_shared`) against IEEE division.

Each row (or token block) is divided by one scale s = max(amax, TINY) / 448, |x| <= amax. On the GPU
the kernels divide once per row, rcp = RN(1/s), and per element

    q0 = RN(x·rcp),   rem = RN(q0·s - x),   q = RN(q0 - rem·rcp)      (rem and q: fused multiply-adds)

The interpreter's `tl.fma` rounds twice (NumPy has no FMA), so under it the kernels keep `div_rn`:
the CPU tests here check the recipe itself in PyTorch, with an exact fp32 FMA (`fma32`); the GPU
tests run the Triton helper against `tl.math.div_rn` in one kernel, on all 2^46 mantissa pairs too
(`-m gpu --runslow`).

Why q = RN(x/s) (Markstein's correction step), the proof these tests check step by step:

1. Scaling. Where |x/s| >= 2^-11 (and s is finite: s >= RN(TINY/448) ~ 2^-48.8, so |x| >= 2^-60)
   every intermediate is a normal number or exact, so x and s can be replaced by their mantissas
   a, b in [1, 2): A = a·2^23 and B = b·2^23 are integers.
2. Error. With z = a/b and y = RN(1/b) = 1/b + d (|d| <= 2^-25): |q0 - z| < 2^-23; rem = b·q0 - a + ρ
   with |ρ| <= 2^-47; so q0 - rem·y = z - b(q0 - z)·d - ρ·y lies within 2^-46 of z.
3. Midpoints. RN of it differs from RN(z) only if an fp32 rounding midpoint m lies within 2^-46 of z.
   a - b·m is a multiple of 2^-48 (z < 1, m = M·2^-25) or of 2^-47 (z >= 1, m = M·2^-24), never 0, so
   0 < |A·2^h - B·M| < 8 (h = 25 or 24). `near_midpoint_pairs` lists every such (A, B) for given B,
   and test_recipe_on_every_quotient_next_to_a_midpoint runs the recipe on them for all 2^23 B.
4. Tiny quotients. Below 2^-11 (fp32 underflow included) q keeps x's sign and |q| <= 1.6·|z| + 2^-149
   < 2^-10, so both quotients are the E4M3 zero of x's sign.
5. Non-finite scales (amax = ±Inf or NaN): rem uses 0 for s = Inf, so q is x / s as IEEE has it
   (±0 for finite x, NaN for ±Inf), as `div_rn` gives it.
"""
from fractions import Fraction

import pytest
import torch
from flamia_kernels import formats as F
from flamia_kernels import quantize as Q
from test_formats import _gen

TWO23, TWO24 = 1 << 23, 1 << 24
INF = float("inf")


# ---------------------------------------------------------------- exact fp32 FMA and the recipe


def fma32(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """RN_fp32(a·b + c) of fp32 tensors with one rounding, as the GPU's FFMA.

    a·b is exact in float64 (48 bits). TwoSum recovers the float64 sum's rounding error, which can
    change the fp32 result only where the float64 sum is itself an fp32 rounding midpoint."""
    a, b, c = a.double(), b.double(), c.double()
    prod = a * b
    total = prod + c
    back = total - prod
    err = (prod - (total - back)) + (c - back)  # total + err = a·b + c exactly
    near = total.float()
    other = torch.nextafter(near, torch.where(total > near.double(), INF, -INF).float())
    midpoint = (near.double() + other.double()) * 0.5 == total  # both fp32: sum and half are exact
    away = midpoint & (err != 0) & ((err > 0) == (other > near))
    return torch.where(away, other, near)


def shared_division(x: torch.Tensor, scale: torch.Tensor, fma=fma32) -> torch.Tensor:
    """The recipe of `quantize._div_by_shared` on fp32 tensors (`scale` broadcasts against x)."""
    rcp = torch.ones_like(scale) / scale  # IEEE, once per row
    rem_scale = torch.where(rcp == 0, 0.0, scale)
    q0 = x * rcp
    rem = fma(q0, rem_scale, -x)
    return fma(rem, -rcp, q0)


def fma_twice_rounded(a, b, c):
    """The interpreter's `tl.fma`: a product and a sum, each rounded to fp32."""
    return a * b + c


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def e4m3_bytes(q: torch.Tensor) -> torch.Tensor:
    return F._saturate_to_fp8(q).view(torch.uint8)


def _fma_by_fractions(a: float, b: float, c: float) -> float:
    """Oracle for fma32: the fp32 nearest to the exact a·b + c (ties to even), by rationals."""
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    guess = torch.tensor(float(exact), dtype=torch.float64).float()
    candidates = [guess, torch.nextafter(guess, torch.tensor(-INF)), torch.nextafter(guess, torch.tensor(INF))]

    def key(v):
        return abs(Fraction(v.item()) - exact), bits(v.reshape(1)).item() & 1

    return min(candidates, key=key).item()


# ---------------------------------------------------------------- quotients next to rounding midpoints


def _valuation(n: torch.Tensor) -> torch.Tensor:
    """2-adic valuation of positive int64 n."""
    return torch.log2((n & -n).double()).round().long()


def _inverse_mod_pow2(odd: torch.Tensor, nbits: int) -> torch.Tensor:
    """odd^-1 mod 2^nbits (nbits <= 25) by Newton's iteration (correct to 3 bits at the start)."""
    mask = (1 << nbits) - 1
    inv = odd & mask
    for _ in range(4):  # 3 -> 6 -> 12 -> 24 -> 48 bits
        inv = (inv * ((2 - odd * inv) & mask)) & mask
    return inv


def near_midpoint_pairs(b_mant: torch.Tensor, max_t: int = 8):
    """Every (A, B), B in b_mant (int64 in [2^23, 2^24)) and A in [2^23, 2^24), whose quotient a/b
    is within |t| <= max_t lattice units of an fp32 rounding midpoint, 0 < |A·2^h - B·M| <= max_t
    for an odd M: h = 24 for a/b in [1, 2) (A >= B), h = 25 for a/b in [1/2, 1) (A < B).
    Returns int64 tensors (A, B)."""
    out_a, out_b = [], []
    val = _valuation(b_mant)
    for h in (24, 25):
        for t in range(-max_t, max_t + 1):
            if t == 0:
                continue
            j = (t & -t).bit_length() - 1
            b = b_mant[val == j]  # B·M ≡ -t (mod 2^h) needs B and t to share their powers of two
            mod = 1 << (h - j)
            m0 = (((-t) >> j) * _inverse_mod_pow2(b >> j, h - j)) & (mod - 1)
            k0 = (TWO24 - m0 + mod - 1) // mod  # first M = m0 + k·mod >= 2^24
            for k in range(max(1, TWO24 // mod) + 1):
                m = m0 + (k0 + k) * mod
                a = (b * m + t) >> h
                keep = (m < 2 * TWO24) & (a >= TWO23) & (a < TWO24) & ((a >= b) if h == 24 else (a < b))
                out_a.append(a[keep])
                out_b.append(b[keep])
    return torch.cat(out_a), torch.cat(out_b)


def _mantissas_to_f32(a: torch.Tensor, b: torch.Tensor):
    return (a.double() / TWO23).float(), (b.double() / TWO23).float()


def _sample_b(n: int, seed: int) -> torch.Tensor:
    """n random mantissas and the edges: 1, 2 - 2^-23, and ones with many trailing zeros."""
    edges = torch.tensor([TWO23, TWO23 + 1, TWO24 - 1, TWO23 + (1 << 22), TWO23 + 8, TWO23 + 24, TWO24 - 8])
    return torch.cat([edges, torch.randint(TWO23, TWO24, (n,), generator=_gen(seed))])


def test_near_midpoint_pairs_are_all_the_pairs():
    """The list of step 3 against brute force over every A for a few B (edges and random)."""
    a_all = torch.arange(TWO23, TWO24)
    for b in [TWO23 + 1, TWO24 - 8, *torch.randint(TWO23, TWO24, (2,), generator=_gen(0)).tolist()]:
        want = torch.zeros(TWO23, dtype=torch.bool)
        for h, in_case in ((24, a_all >= b), (25, a_all < b)):
            scaled = a_all << h
            for m in (scaled // b - 1, scaled // b, scaled // b + 1, scaled // b + 2):
                t = scaled - b * m
                want |= in_case & (m % 2 == 1) & (m >= TWO24) & (m < 2 * TWO24) & (t != 0) & (t.abs() <= 16)
        a, _ = near_midpoint_pairs(torch.tensor([b]), max_t=16)
        assert torch.equal(a.sort().values, a_all[want]), b


def _double_rounding_traps(n: int, seed: int):
    """(a, b, c) whose float64 a·b + c lands exactly on an fp32 midpoint while the exact value does not:
    c + u/2·(1 - 2^-2k) with u = ulp(c), a·b = ±(1 + 2^-k)·(1 - 2^-k)·u/2, k in 15..23."""
    g = _gen(seed)
    c = (1 + torch.randint(0, TWO23, (n,), generator=g).double() / TWO23).float()
    k = torch.randint(15, 24, (n,), generator=g).double()
    sign = torch.randint(0, 2, (n,), generator=g).float() * 2 - 1
    a = (1 + torch.exp2(-k)).float()
    b = ((1 - torch.exp2(-k)) * 2.0**-24).float() * sign
    scale = torch.exp2(torch.randint(-60, 60, (n,), generator=g).float())
    return a * scale, b, c * scale


def test_fma32_rounds_once():
    """The exact-FMA emulation equals rational arithmetic, on both FMAs of the recipe (near-midpoint
    quotients) and on double-rounding traps; the interpreter's twice-rounded fma differs on them."""
    a, b = _mantissas_to_f32(*near_midpoint_pairs(_sample_b(256, seed=1)))
    x = a * torch.exp2(torch.randint(-60, 60, a.shape, generator=_gen(2)).float())
    s = b * torch.exp2(torch.randint(-40, 40, a.shape, generator=_gen(3)).float())
    rcp = 1.0 / s
    q0 = x * rcp
    rem = fma32(q0, s, -x)
    traps = _double_rounding_traps(200, seed=4)
    assert not torch.equal(fma32(*traps), traps[0].double().mul(traps[1].double()).add(traps[2].double()).float())
    pick = torch.randperm(len(x), generator=_gen(4))[:300]
    for ta, tb, tc in [(q0[pick], s[pick], -x[pick]), (rem[pick], -rcp[pick], q0[pick]), traps]:
        want = [_fma_by_fractions(*abc) for abc in zip(ta.tolist(), tb.tolist(), tc.tolist(), strict=True)]
        assert torch.equal(bits(fma32(ta, tb, tc)), bits(torch.tensor(want, dtype=torch.float32)))
    assert not torch.equal(fma32(rem, -rcp, q0), fma_twice_rounded(rem, -rcp, q0))


def _check_pairs(a: torch.Tensor, b: torch.Tensor, seed: int) -> None:
    """Recipe == IEEE division on mantissa pairs, scaled to the kernels' exponents (quotients 2^-10..2^8)."""
    x, s = _mantissas_to_f32(a, b)
    assert torch.equal(bits(shared_division(x, s)), bits(x / s))
    e_s = torch.randint(-48, 119, s.shape, generator=_gen(seed)).float()
    e_q = torch.randint(-10, 8, s.shape, generator=_gen(seed + 1)).float()
    sign = torch.randint(0, 2, s.shape, generator=_gen(seed + 2)).float() * 2 - 1
    x, s = x * torch.exp2(e_s + e_q) * sign, s * torch.exp2(e_s)
    assert torch.equal(bits(shared_division(x, s)), bits(x / s))


def test_recipe_on_quotients_next_to_rounding_midpoints():
    """Step 3 on a sample of B: every pair within 16 lattice units of a midpoint (the proof needs 8)."""
    a, b = near_midpoint_pairs(_sample_b(4096, seed=5), max_t=16)
    assert len(a) > 40_000 and (a >= b).any() and (a < b).any()
    _check_pairs(a, b, seed=6)
    # the inputs are sharp: without the correction, or with a twice-rounded FMA, the bits differ
    x, s = _mantissas_to_f32(a, b)
    ieee = bits(x / s)
    naive_wrong = (bits(x * (1.0 / s)) != ieee).float().mean()
    assert naive_wrong > 0.1, naive_wrong
    assert (bits(shared_division(x, s, fma_twice_rounded)) != ieee).any()


def test_recipe_on_random_mantissa_pairs():
    a = torch.randint(TWO23, TWO24, (1 << 20,), generator=_gen(7))
    b = torch.randint(TWO23, TWO24, (1 << 20,), generator=_gen(8))
    _check_pairs(a, b, seed=9)


def test_error_bounds_of_step_2():
    """|q0 - z| < 2^-23 and |q0 - rem·rcp - z| < 2^-46 on mantissas (z = a/b exactly, as rationals):
    random pairs, pairs next to midpoints, and a, b near 2 (where q0 is farthest from z)."""
    a_mid, b_mid = near_midpoint_pairs(_sample_b(64, seed=30), max_t=16)
    a = torch.cat([a_mid, torch.randint(TWO23, TWO24, (1000,), generator=_gen(31)),
                   torch.randint(TWO24 - 4096, TWO24, (1000,), generator=_gen(32))])
    b = torch.cat([b_mid, torch.randint(TWO23, TWO24, (1000,), generator=_gen(33)),
                   torch.randint(TWO24 - 4096, TWO24, (1000,), generator=_gen(34))])
    x, s = _mantissas_to_f32(a, b)
    rcp = 1.0 / s
    q0 = x * rcp
    rem = fma32(q0, s, -x)
    worst_q0 = worst_q = Fraction(0)
    for xi, si, ri, q0i, remi in zip(x.tolist(), s.tolist(), rcp.tolist(), q0.tolist(), rem.tolist(), strict=True):
        z = Fraction(xi) / Fraction(si)
        worst_q0 = max(worst_q0, abs(Fraction(q0i) - z) * 2**23)
        worst_q = max(worst_q, abs(Fraction(q0i) - Fraction(remi) * Fraction(ri) - z) * 2**46)
    assert 0.5 < worst_q0 < 1 and 0 < worst_q < 1, (float(worst_q0), float(worst_q))


def test_recipe_on_every_quotient_next_to_a_midpoint():
    """Step 3 for all 2^23 mantissas B (46.5M pairs, ~6 s): with steps 1-2, q = RN(x/s) for every
    x, s of the kernels with |x/s| >= 2^-11."""
    for start in range(TWO23, TWO24, 1 << 20):
        a, b = near_midpoint_pairs(torch.arange(start, start + (1 << 20)), max_t=8)
        x, s = _mantissas_to_f32(a, b)
        assert torch.equal(bits(shared_division(x, s)), bits(x / s)), start


# ---------------------------------------------------------------- the kernels' rows


def _kernel_rows(rows: int, cols: int, seed: int):
    """(x [rows, cols], scale [rows, 1]) as the kernels meet them: amax over 2^-149..2^128 (incl. amax
    below TINY and subnormal, and the largest float), scale = formats.fp8_scale(amax), x in [-amax, amax] spread over 40
    binades, x = ±amax, ±0, next to E4M3 rounding points (zero's tie 2^-10 incl.) and fp32 underflow."""
    g = _gen(seed)
    amax = torch.exp2(torch.rand(rows, 1, generator=g) * 275 - 149) * (1 + torch.rand(rows, 1, generator=g))
    amax[:4, 0] = torch.tensor([F.FP8_TINY, F.FP8_TINY * 0.75, 2.0**-149, torch.finfo(torch.float32).max])
    scale = F.fp8_scale(amax)
    u = (torch.rand(rows, cols, generator=g) + 1) * torch.exp2(-torch.randint(1, 41, (rows, cols), generator=g).float())
    x = amax * u
    table = torch.arange(0, 0x7F, dtype=torch.uint8).view(F.FP8_DTYPE).float()
    points = torch.cat([table, (table[1:] + table[:-1]) / 2, torch.tensor([2.0**-11, 2.0**-126, 2.0**-150])])
    near = points[torch.randint(0, len(points), (rows, cols // 4), generator=g)] * scale  # quotient near a point
    nudge = torch.randint(-3, 4, near.shape, generator=g)
    for _ in range(3):
        near = torch.where(nudge > 0, torch.nextafter(near, torch.tensor(INF)), near)
        near = torch.where(nudge < 0, torch.nextafter(near, torch.tensor(0.0)), near)
        nudge = nudge - nudge.sign()
    x[:, : cols // 4] = torch.minimum(near, amax)
    x[:, -6:] = torch.cat([amax, torch.nextafter(amax, torch.tensor(0.0)), torch.zeros_like(amax),
                           torch.full_like(amax, 2.0**-149), torch.full_like(amax, 2.0**-126), amax / 3], dim=1)
    sign = torch.randint(0, 2, x.shape, generator=g).float() * 2 - 1
    return x * sign, scale


def test_recipe_on_kernel_rows():
    """Steps 1-4 on the kernels' own scales: the E4M3 bytes everywhere, the fp32 bits from 2^-11 up."""
    x, scale = _kernel_rows(4096, 256, seed=10)
    x[1::2, -4] = -0.0
    q, ieee = shared_division(x, scale), x / scale
    assert torch.equal(e4m3_bytes(q), e4m3_bytes(ieee))
    assert torch.equal(bits(q) < 0, bits(ieee) < 0)  # the sign, -0 included
    regular = ieee.abs() >= 2.0**-11
    assert regular.float().mean() > 0.3 and (~regular).sum() > 10_000
    assert torch.equal(bits(q)[regular], bits(ieee)[regular])
    exact = (x.double() / scale.double()).abs()
    assert (q.abs()[~regular] <= 1.6 * exact[~regular] + 2.0**-149).all() and (q.abs() <= 448 * (1 + 2**-23)).all()


def test_tiny_quotients_keep_their_sign_and_zero_byte():
    """Step 4 where it is tightest: x of a few 2^-149 under the largest scales (q0 = 0 or a
    subnormal), and quotients next to 2^-150, fp32's last rounding point."""
    g = _gen(11)
    scale = F.fp8_scale(torch.exp2(torch.rand(2048, 1, generator=g) * 127 + 1))
    k = torch.randint(1, 64, (2048, 64), generator=g).float()
    x = torch.cat([k * 2.0**-149, (scale * 2.0**-150) * (1 + (k - 32) * 2.0**-23)], dim=1)
    x = x * (torch.randint(0, 2, x.shape, generator=g).float() * 2 - 1)
    q, ieee = shared_division(x, scale), x / scale
    assert (ieee.abs() < 2.0**-11).all() and (ieee != 0).any()
    assert torch.equal(bits(q) < 0, bits(x) < 0) and torch.equal(e4m3_bytes(q), e4m3_bytes(ieee))
    assert (q.abs() <= 1.6 * (x / scale.double()).abs() + 2.0**-149).all()


def test_recipe_on_non_finite_scales():
    """Step 5: a row whose amax is Inf or NaN gives IEEE's x / scale, ±0 and NaN where div_rn has them."""
    x = torch.randn(4, 64, generator=_gen(12)) * 1e3
    x[:, :4] = torch.tensor([0.0, -0.0, 2.0**-149, -(2.0**-149)])
    x[0, 4], x[1, 5] = INF, -INF
    x[2, 6] = float("nan")
    scale = F.fp8_scale(x.abs().amax(-1, keepdim=True))
    x[3, 7] = INF
    scale[3] = INF  # as from a row whose +Inf is its amax
    assert torch.isinf(scale[[0, 1, 3]]).all() and torch.isnan(scale[2]).all()
    q, ieee = shared_division(x, scale), x / scale
    assert torch.equal(q.isnan(), ieee.isnan())
    assert torch.equal(bits(q)[~ieee.isnan()], bits(ieee)[~ieee.isnan()])


# ---------------------------------------------------------------- GPU: the Triton helper itself

if Q.HAS_TRITON:
    import triton
    import triton.language as tl

    @triton.jit
    def _division_pair_kernel(X, Scale, Fast, Ieee, BLOCK: tl.constexpr):
        """x / scale elementwise by `_div_by_shared` and by div_rn in one kernel, as fp32 bits."""
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(X + offs)
        scale = tl.load(Scale + offs)
        tl.store(Fast + offs, Q._div_by_shared(x, scale).to(tl.int32, bitcast=True))
        tl.store(Ieee + offs, tl.math.div_rn(x, scale).to(tl.int32, bitcast=True))

    @triton.jit
    def _every_pair_kernel(Bad, B0, NAIVE: tl.constexpr, BLOCK: tl.constexpr):
        """One program: scale = 1 + (B0 + pid)·2^-23 against every x = 1 + k·2^-23; the count of
        quotients whose bits differ from div_rn's (NAIVE: x·rcp without the correction)."""
        scale = ((127 << 23) | (B0 + tl.program_id(0))).to(tl.float32, bitcast=True)
        bad = tl.zeros((BLOCK,), tl.int32)
        for start in range(0, 1 << 23, BLOCK):
            x = ((127 << 23) | (start + tl.arange(0, BLOCK))).to(tl.float32, bitcast=True)
            if NAIVE:
                fast = x * tl.math.div_rn(1.0, scale)
            else:
                fast = Q._div_by_shared(x, scale)
            ieee = tl.math.div_rn(x, tl.broadcast_to(scale, (BLOCK,)))
            bad += (fast.to(tl.int32, bitcast=True) != ieee.to(tl.int32, bitcast=True)).to(tl.int32)
        tl.store(Bad + tl.program_id(0), tl.sum(bad))


def _gpu_fast_and_ieee(x: torch.Tensor, scale: torch.Tensor):
    """Bits of both quotients on CUDA; scale broadcasts against x (as a row's scale does)."""
    x = x.cuda().contiguous()
    scale = scale.cuda().expand(x.shape).contiguous()
    fast, ieee = (torch.empty(x.shape, dtype=torch.int32, device="cuda") for _ in range(2))
    _division_pair_kernel[(x.numel() // 1024,)](x, scale, fast, ieee, BLOCK=1024)
    return fast, ieee


def _assert_same(fast: torch.Tensor, want: torch.Tensor) -> None:
    same = fast == want
    assert same.all(), f"{(~same).sum().item()} differ, first at {(~same).nonzero()[0].tolist()}"


@pytest.mark.gpu
def test_gpu_div_by_shared_on_kernel_rows():
    """2^24 quotients of the kernels' kind, rows with Inf / NaN scales among them: the GPU's bits are
    the CPU recipe's (so the proof above is about this hardware), div_rn's from 2^-11 up, and div_rn's
    E4M3 bytes everywhere (below 2^-11 a subnormal x or remainder may change the fp32 bits)."""
    assert Q._FUSED_FMA  # compiled: the helper's FMA path
    x, scale = _kernel_rows(1 << 14, 1024, seed=20)
    x[:8] = torch.randn(8, 1024, generator=_gen(21))
    x[0, 3], x[1, 4], x[2, 5], x[3, 6] = INF, -INF, float("nan"), -0.0
    scale[:8] = F.fp8_scale(x[:8].abs().amax(-1, keepdim=True))
    fast, ieee = (t.cpu() for t in _gpu_fast_and_ieee(x, scale))
    finite = scale.isfinite().expand(x.shape)
    _assert_same(fast[finite], bits(shared_division(x, scale))[finite])
    _assert_same(fast[~finite], ieee[~finite])  # NaN bits included
    regular = (x / scale).abs() >= 2.0**-11
    assert (~regular).sum() > 100_000
    _assert_same(fast[regular], ieee[regular])
    _assert_same(e4m3_bytes(fast.view(torch.float32)), e4m3_bytes(ieee.view(torch.float32)))


@pytest.mark.gpu
def test_gpu_div_by_shared_equals_div_rn_next_to_midpoints():
    """Quotients within 16 lattice units of an fp32 rounding midpoint, at the kernels' exponents,
    and 2^24 random mantissa pairs."""
    a, b = near_midpoint_pairs(_sample_b(1 << 15, seed=22), max_t=16)
    a = torch.cat([a, torch.randint(TWO23, TWO24, (1 << 24,), generator=_gen(23))])
    b = torch.cat([b, torch.randint(TWO23, TWO24, (1 << 24,), generator=_gen(24))])
    x, s = _mantissas_to_f32(a, b)
    e_s = torch.randint(-48, 119, s.shape, generator=_gen(25)).float()
    e_q = torch.randint(-10, 8, s.shape, generator=_gen(26)).float()
    x, s = x * torch.exp2(e_s + e_q), s * torch.exp2(e_s)
    n = len(x) // 1024 * 1024
    _assert_same(*_gpu_fast_and_ieee(x[:n], s[:n]))


def _count_bad_pairs(b0: int, count: int, naive: bool = False) -> int:
    bad = torch.zeros(count, dtype=torch.int32, device="cuda")
    _every_pair_kernel[(count,)](bad, b0, NAIVE=naive, BLOCK=2048, num_warps=8)
    return bad.sum().item()


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_div_by_shared_on_every_mantissa_pair():
    """Steps 2-3 by brute force on the hardware: all 2^46 pairs of fp32 mantissas (~50 s on the H200)."""
    assert _count_bad_pairs(12345, 64, naive=True) > 0  # the count sees a wrong last bit
    for b0 in range(0, TWO23, 1 << 16):
        assert _count_bad_pairs(b0, 1 << 16) == 0, b0
