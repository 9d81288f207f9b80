"""`dq_from_ds` (launch option ds_out's dQ product, Triton, here under the interpreter): dQ from a dS buffer laid out
as the warp-specialized dK/dV kernel writes it, against the same sums in PyTorch, on fresh random values, under GQA;
the tiles' unwritten places hold NaN, so a product that read one would show it."""
import pytest
import torch
from flamia_kernels import dq_from_ds as dq_from_ds_module
from flamia_kernels.attention_bwd_gluon import BN, DS_KEY_ORDER, DS_QB
from flamia_kernels.dq_from_ds import QB, TB, dq_from_ds


@pytest.fixture(params=["loads", "tma", "pairs", "one_loop"])
def tma(request, monkeypatch):
    """Each launch of the product: the kernel's loads, its TMA descriptors' (`dq_from_ds.TMA`), two query blocks
    a program (`dq_from_ds.PAIRS`, lengths a multiple of 256; others fall back to one block a program), and one loop
    over every key block with the diagonal's unwritten queries masked in the load (`dq_from_ds.ONE_LOOP`)."""
    monkeypatch.setattr(dq_from_ds_module, "TMA", request.param == "tma")
    monkeypatch.setattr(dq_from_ds_module, "PAIRS", request.param == "pairs")
    monkeypatch.setattr(dq_from_ds_module, "ONE_LOOP", request.param == "one_loop")
    return request.param


def key_order(n: int) -> torch.Tensor:
    """The fp8 dS buffer's key order over n keys (`attention_bwd_gluon.DS_KEY_ORDER` within each 16)."""
    return (torch.arange(n) // 16 * 16).reshape(-1, 16) + torch.tensor(DS_KEY_ORDER)


def _pack(y: torch.Tensor, dtype=torch.bfloat16) -> torch.Tensor:
    """The dS buffer of y [B, Hq, S (queries), S (keys)] (`attention_bwd_gluon.ds_buffer`'s layout): per head and
    query block qb, the [BN keys, QB queries] tiles of key blocks 0 .. 2qb + 1 (in fp8 [QB, BN], the keys in
    `key_order`); where the dK/dV kernel writes nothing (queries before a key block's first key) NaN."""
    b, hq, seq, _ = y.shape
    n_qb = seq // QB
    tiles = []
    for bh in range(b * hq):
        yb = y.reshape(b * hq, seq, seq)[bh]
        for qb in range(n_qb):
            for kb in range((qb + 1) * QB // BN):
                t = yb[qb * QB:(qb + 1) * QB, kb * BN:(kb + 1) * BN].t().clone()  # [keys, queries]
                queries = qb * QB + torch.arange(QB)
                t[:, queries < kb * BN] = float("nan")
                tiles.append(t.t()[:, key_order(BN).flatten()].contiguous() if dtype == torch.float8_e4m3fn else t)
    return torch.cat(tiles).to(dtype)


def _want(y, kbf, kbbf, sm_scale):
    """sm_scale · Σ_k y[q, k] · K[k], K the token-block copy's rows where k's token block precedes q's, else the
    per-token rows; causal (k ≤ q), in fp32 over the bf16 values."""
    b, hq, seq, _ = y.shape
    g = hq // kbf.shape[1]
    q_blk = torch.arange(seq)[:, None] // TB
    k_blk = torch.arange(seq)[None, :] // TB
    causal = torch.arange(seq)[None, :] <= torch.arange(seq)[:, None]
    yb = y.to(torch.bfloat16).float() * causal
    off = (k_blk < q_blk).float()
    kf, kbf_f = (x.float().repeat_interleave(g, 1) for x in (kbbf, kbf))
    return (sm_scale * ((yb * off) @ kf + (yb * (1 - off)) @ kbf_f)).to(torch.bfloat16)


@pytest.mark.parametrize("b,hq,hkv,seq", [(1, 2, 2, 256), (2, 4, 2, 384), (1, 2, 1, 512)])
def test_dq_from_ds_matches_the_sums(b, hq, hkv, seq, tma):
    assert QB == DS_QB
    gen = torch.Generator().manual_seed(seq + hq)
    y = torch.randn(b, hq, seq, seq, generator=gen)
    y = torch.where(torch.arange(seq)[None, :] <= torch.arange(seq)[:, None], y, 0.0)  # P = 0 above the diagonal
    kbf = torch.randn(b, hkv, seq, 128, generator=gen).to(torch.bfloat16)
    kbbf = torch.randn(b, hkv, seq, 128, generator=gen).to(torch.bfloat16)
    got = dq_from_ds(_pack(y), kbf, kbbf, b, hq, seq, 0.125)
    want = _want(y, kbf, kbbf, 0.125)
    assert got.isfinite().all()
    assert torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2)
    # the token-block copy's rows matter off the diagonal: with the per-token rows everywhere the sums differ
    assert not torch.allclose(got.float(), _want(y, kbf, kbf, 0.125).float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("b,hq,hkv,seq", [(1, 2, 2, 256), (2, 4, 2, 384), (1, 2, 1, 512)])
def test_dq_from_ds_fp8_matches_the_sums(b, hq, hkv, seq, tma):
    """An fp8 buffer (launch options ds_out with fp8_dq): E4M3 tiles of dS·s_k/ρ against K's bytes K-major, both in
    the buffer's key order, ρ per query back on the sums: ρ · sm_scale · Σ_k y8[q, k] · K8[k] (the probe's numerics,
    `reference.backward_math(fp8_dq=True)`)."""
    gen = torch.Generator().manual_seed(seq + hq + 1)
    y = torch.randn(b, hq, seq, seq, generator=gen) * 60.0
    y = torch.where(torch.arange(seq)[None, :] <= torch.arange(seq)[:, None], y, 0.0)
    y8 = y.to(torch.float8_e4m3fn).float()  # the values the buffer holds
    k8 = (torch.randn(b, hkv, seq, 128, generator=gen) * 40.0).to(torch.float8_e4m3fn)
    kb8 = (torch.randn(b, hkv, seq, 128, generator=gen) * 40.0).to(torch.float8_e4m3fn)
    rho = torch.exp2(torch.randint(-6, 6, (b, hq, seq), generator=gen).float())
    k8t, kb8t = (x.transpose(-1, -2)[..., key_order(seq).flatten()].contiguous() for x in (k8, kb8))
    got = dq_from_ds(_pack(y8, torch.float8_e4m3fn), k8t, kb8t, b, hq, seq, 0.125, rho=rho)
    want = _want(y8 * rho[..., None], k8.float().to(torch.bfloat16), kb8.float().to(torch.bfloat16), 0.125)
    assert got.isfinite().all()
    assert torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2 * want.float().abs().max().item())
    # ρ is applied per query: without it the sums differ
    assert not torch.allclose(got.float(), _want(y8, k8.float(), kb8.float(), 0.125).float(), rtol=1e-2, atol=1e-2)
    with pytest.raises(ValueError, match="needs its queries' scales"):
        dq_from_ds(_pack(y8, torch.float8_e4m3fn), k8t, kb8t, b, hq, seq, 0.125)


def test_dq_from_ds_rejects_a_length_off_its_blocks():
    with pytest.raises(ValueError, match="multiple of 128"):
        dq_from_ds(torch.empty(0, 128, dtype=torch.bfloat16), torch.empty(1, 1, 320, 128, dtype=torch.bfloat16),
                   torch.empty(1, 1, 320, 128, dtype=torch.bfloat16), 1, 1, 320, 1.0)


def _random_case(b, hq, hkv, seq, fp8: bool, seed: int):
    """(buffer, KBF, KBBF, ρ) of fresh random values for comparing two launches' bits: a causal dS packed as the
    dK/dV kernel writes it (NaN where it writes nothing), K's bf16 rows, or for an fp8 buffer K's bytes K-major and a
    power-of-two ρ per query (None for bf16)."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.where(torch.arange(seq)[None, :] <= torch.arange(seq)[:, None],
                    torch.randn(b, hq, seq, seq, generator=gen) * (60.0 if fp8 else 1.0), 0.0)
    if fp8:
        buf = _pack(y.to(torch.float8_e4m3fn).float(), torch.float8_e4m3fn)
        kbf, kbbf = ((torch.randn(b, hkv, 128, seq, generator=gen) * 40).to(torch.float8_e4m3fn) for _ in range(2))
        return buf, kbf, kbbf, torch.exp2(torch.randint(-4, 4, (b, hq, seq), generator=gen).float())
    kbf, kbbf = (torch.randn(b, hkv, seq, 128, generator=gen).to(torch.bfloat16) for _ in range(2))
    return _pack(y), kbf, kbbf, None


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_dq_from_ds_one_loop_gives_the_two_loops_bits(fp8, monkeypatch):
    """One loop over every key block (`ONE_LOOP`: the unwritten queries of the diagonal token block read as zeros by
    a masked load, the copy of K picked per key block) sums the same products in the same order as the two loops:
    the same dQ bits, with NaN where the dK/dV kernel writes nothing (a mask that let one through would show)."""
    b, hq, hkv, seq = 2, 4, 2, 384
    buf, kbf, kbbf, rho = _random_case(b, hq, hkv, seq, fp8, seed=11)
    monkeypatch.setattr(dq_from_ds_module, "ONE_LOOP", False)
    two = dq_from_ds(buf, kbf, kbbf, b, hq, seq, 0.125, rho=rho)
    monkeypatch.setattr(dq_from_ds_module, "ONE_LOOP", True)
    one = dq_from_ds(buf, kbf, kbbf, b, hq, seq, 0.125, rho=rho)
    assert two.isfinite().all() and two.abs().sum() > 0
    assert torch.equal(one.view(torch.int16), two.view(torch.int16))


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_dq_from_ds_pairs_give_the_single_blocks_bits(fp8, monkeypatch):
    """Two query blocks a program (`PAIRS`) sum each block's products as one block a program does, in the same order:
    the same dQ bits (a pair's shared K tile must not change which copy a block multiplies)."""
    b, hq, hkv, seq = 1, 2, 1, 768
    buf, kbf, kbbf, rho = _random_case(b, hq, hkv, seq, fp8, seed=7)
    single = dq_from_ds(buf, kbf, kbbf, b, hq, seq, 0.125, rho=rho)
    monkeypatch.setattr(dq_from_ds_module, "PAIRS", True)
    pairs = dq_from_ds(buf, kbf, kbbf, b, hq, seq, 0.125, rho=rho)
    assert single.isfinite().all()
    assert torch.equal(pairs.view(torch.int16), single.view(torch.int16))


@pytest.mark.parametrize("probe", ["K_ONCE", "TMA"])
def test_one_loop_gives_way_to_the_two_loop_probes(probe, monkeypatch):
    """ONE_LOOP (the default) returns before the two loops, so the probes written into them (K_ONCE, TMA) would go
    unmeasured under it: with either set, the launch runs the two loops."""
    seen = []
    monkeypatch.setattr(dq_from_ds_module, "ONE_LOOP", True)
    monkeypatch.setattr(dq_from_ds_module, probe, True)
    monkeypatch.setattr(dq_from_ds_module, "_LAUNCH", lambda grid, args, consts, opts=None: seen.append(consts))
    monkeypatch.setattr(dq_from_ds_module, "_tma_views", lambda ds, kbf, kbbf, fp8, d: (ds, kbf, kbbf))
    buf, kbf, kbbf, rho = _random_case(1, 2, 1, 256, False, seed=3)
    dq_from_ds(buf, kbf, kbbf, 1, 2, 256, 0.125, rho=rho)
    assert len(seen) == 1 and seen[0][probe] and not seen[0]["ONE_LOOP"], seen
