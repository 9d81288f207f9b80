"""The backward's `pre` copies (`attention_bwd_copies`) with V's and K's token-block copies deferred: the
copies pass re-quantizes V's rows per token block from Vᵀ's per-token bytes, where the old route computed the
copy as Vᵀ bytes (`quantize.requantize_fp8_token_blocks`, transposed) and transposed it back, and K's copy
from K's per-token bytes, where the old route ran `requantize_fp8_token_blocks` as a pass of its own. Both
must give the same bytes, block scales and gradients, bit for bit."""
from dataclasses import replace

import pytest
import torch
from attention_saved import backward_args
from flamia_kernels import AttentionSpec, attention_bwd
from flamia_kernels import quantize as QZ
from flamia_kernels.attention_bwd_copies import STATS_ROWS, bf16_copies, query_stats
from flamia_kernels.attention_bwd_gluon import DS_KEY_ORDER
from flamia_kernels.attention_operands import OffDiagonal, Operand, materialize_off_diagonal
from flamia_kernels.formats import FP8_TINY


def _inputs(b, hq, hkv, s, d, seed):
    gen = torch.Generator().manual_seed(seed)
    mk = lambda h: torch.randn(b, h, s, d, generator=gen).to(torch.bfloat16)  # noqa: E731
    return mk(hq), mk(hkv), mk(hkv), mk(hq)


def _deferred(v: Operand) -> Operand:
    return replace(v, off=OffDiagonal(None, None, 128, transposed=True))


def _deferred_k(k: Operand) -> Operand:
    return replace(k, off=OffDiagonal(None, None, 128))


def _special_bytes(v: Operand) -> Operand:
    """v with NaN bytes (0x7F, 0xFF) in one token block, an all-zero block (the TINY clamp), a token of
    huge scale and one of a subnormal scale: the requantization's edge cases."""
    vt = v.vals_t.view(torch.uint8).clone()
    scale = v.scale.clone()
    vt[0, 0, 3, 5] = 0x7F
    vt[0, 0, 7, 9] = 0xFF
    vt[0, -1, :, 128:256] = 0
    scale[0, 0, 200] = 3.0e38
    scale[0, -1, 300] = 1.0e-40
    vt[0, -1, 11, 300] = 0x01
    vt = vt.view(torch.float8_e4m3fn)
    return Operand(vt.mT.contiguous(), scale, vals_t=vt)


@pytest.mark.parametrize("d,special", [(64, False), (128, False), (64, True)])
def test_requantized_rows_equal_the_transposed_copy(d, special):
    """VR, VBR and the block scales from the deferred copy equal the old route's: the Vᵀ copy of
    `requantize_fp8_token_blocks(transposed=True)`, its scale, and the per-token bytes, as rows."""
    spec = AttentionSpec.parse("fp8")
    q, k, v, do = _inputs(2, 2, 2, 384, d, seed=d + special)
    args = backward_args(spec, q, k, v, do)
    qo, ko, vo, doo, lse2, moff, delta = args[:7]
    if special:
        vo = _special_bytes(vo)
    deferred = _deferred(vo)
    old = materialize_off_diagonal(deferred, QZ)  # the old route, from the per-token bytes
    want_vbr, want_vbs = QZ.requantize_fp8_token_blocks(vo.vals_t, vo.scale, 128, transposed=True)
    assert torch.equal(old.off.vals.view(torch.uint8), want_vbr.view(torch.uint8))
    got = bf16_copies(qo, ko, deferred, doo, lse2, moff, delta)
    ref = bf16_copies(qo, ko, old, doo, lse2, moff, delta)
    names = ("QB", "KBF", "KBBF", "VR", "VBR", "VBS", "KB", "KBS")
    for name, a, b in zip(names, got, ref, strict=True):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), name  # NaN scales too: their bits
    assert torch.equal(got[3].view(torch.uint8), vo.vals_t.mT.contiguous().view(torch.uint8))
    assert torch.equal(got[4].view(torch.uint8), want_vbr.mT.contiguous().view(torch.uint8))
    assert torch.equal(got[5].view(torch.int32), want_vbs.reshape(got[5].shape).view(torch.int32))
    if special:  # the cases were hit: a NaN block, an Inf one, the clamp
        tiny = torch.tensor(FP8_TINY, dtype=torch.float32) / 448
        assert got[5].isnan().any() and got[5].isinf().any() and (got[5] == tiny).any()


def _special_k(k: Operand) -> Operand:
    """k with NaN bytes in one token block, an all-zero block (the TINY clamp) and tokens of a huge and a
    subnormal scale: the requantization's edge cases, for K's rows."""
    rows = k.vals.view(torch.uint8).clone()
    scale = k.scale.clone()
    rows[0, 0, 5, 3] = 0x7F
    rows[0, 0, 9, 7] = 0xFF
    rows[0, -1, 128:256] = 0
    scale[0, 0, 200] = 3.0e38
    scale[0, -1, 300] = 1.0e-40
    rows[0, -1, 300, 11] = 0x01
    return replace(k, vals=rows.view(torch.float8_e4m3fn), scale=scale, off=None)


@pytest.mark.parametrize("d,special", [(64, False), (128, False), (64, True)])
def test_requantized_k_copy_equals_the_separate_pass(d, special):
    """K's copy deferred (with V's, as the autograd backward leaves them): the copies pass writes K's
    token-block bytes, block scales and their bf16 copy KBBF equal to `requantize_fp8_token_blocks` of K's
    per-token bytes and the copies from the given copy; every other output unchanged."""
    spec = AttentionSpec.parse("fp8")
    q, k, v, do = _inputs(2, 2, 2, 384, d, seed=3 * d + special)
    qo, ko, vo, doo, lse2, moff, delta = backward_args(spec, q, k, v, do)[:7]
    if special:
        ko = _special_k(ko)
    old = materialize_off_diagonal(_deferred_k(ko), QZ)  # the old route: the separate pass
    want_kb, want_kbs = QZ.requantize_fp8_token_blocks(ko.vals, ko.scale, 128)
    assert torch.equal(old.off.vals.view(torch.uint8), want_kb.view(torch.uint8))
    got = bf16_copies(qo, _deferred_k(ko), _deferred(vo), doo, lse2, moff, delta)
    ref = bf16_copies(qo, old, _deferred(vo), doo, lse2, moff, delta)
    names = ("QB", "KBF", "KBBF", "VR", "VBR", "VBS", "KB", "KBS")
    for name, a, b in zip(names, got, ref, strict=True):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), name  # NaN scales too: their bits
    assert torch.equal(got[6].view(torch.uint8), want_kb.view(torch.uint8))
    assert torch.equal(got[7].view(torch.int32), want_kbs.reshape(got[7].shape).view(torch.int32))
    if special:  # the cases were hit: a NaN block, an Inf one, the clamp
        tiny = torch.tensor(FP8_TINY, dtype=torch.float32) / 448
        assert got[7].isnan().any() and got[7].isinf().any() and (got[7] == tiny).any()


@pytest.mark.parametrize("causal,hq,hkv,half", [(True, 4, 2, False), (True, 2, 1, True), (False, 2, 2, False)])
def test_backward_with_deferred_copies_is_bit_identical(causal, hq, hkv, half):
    """The backward with V's and K's copies deferred (the autograd path, `attach_off_diagonal(defer_v=True,
    defer_k=True)`): pre re-quantizes them within its copies, any other launch computes them first; every
    gradient equals the launch with the copies given, bit for bit."""
    spec = AttentionSpec.parse("fp8")
    q, k, v, do = _inputs(2, hq, hkv, 384, 64, seed=5 + hq + causal)
    args = list(backward_args(spec, q, k, v, do, causal=causal))
    cfg = {"num_warps": 4, "num_stages": 1, "sub": 32, **({"bn": 64, "bm": 64} if half else {})}
    given = attention_bwd.backward(*args, config=cfg)
    args[1], args[2] = _deferred_k(args[1]), _deferred(args[2])
    for extra in ({}, {"pre": True}):
        got = attention_bwd.backward(*args, config={**cfg, **extra})
        for name, a, b in zip(("dQ", "dK", "dV"), got, given, strict=True):
            assert a.abs().sum() > 0 and torch.equal(a, b), f"{name} {extra}"
    assert args[1].off.deferred and args[2].off.deferred  # the caller's operands are left as they were


def test_key_copies_as_two_launches_write_the_same_bytes(monkeypatch):
    """`KEY_COPIES_SPLIT` (the default): K's half and V's half of the key copies as two launches give the
    joint launch's outputs, both copies deferred and both given."""
    from flamia_kernels import attention_bwd_copies

    spec = AttentionSpec.parse("fp8")
    q, k, v, do = _inputs(2, 4, 2, 384, 64, seed=13)
    qo, ko, vo, doo, lse2, moff, delta = backward_args(spec, q, k, v, do)[:7]
    for kk, vv in ((ko, vo), (_deferred_k(ko), _deferred(vo))):
        monkeypatch.setattr(attention_bwd_copies, "KEY_COPIES_SPLIT", False)
        want = bf16_copies(qo, kk, vv, doo, lse2, moff, delta)
        monkeypatch.setattr(attention_bwd_copies, "KEY_COPIES_SPLIT", True)
        got = bf16_copies(qo, kk, vv, doo, lse2, moff, delta)
        for a, b in zip(got, want, strict=True):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_query_stats_are_the_row_stats():
    """`bf16_copies(stats=...)` writes, per query, s_q, M, 1/l, delta and s_dO in `query_stats`' rows: the
    values `row_stats` gives the kernels (M = floor(lse2) - M offset, 1/l = exp2(M - lse2)), the copies
    unchanged; the padding rows are left alone. A buffer of the wrong shape is refused."""
    spec = AttentionSpec.parse("fp8")
    q, k, v, do = _inputs(2, 4, 2, 384, 64, seed=11)
    qo, ko, vo, doo, lse2, moff, delta = backward_args(spec, q, k, v, do)[:7]
    stats = query_stats(qo).fill_(-7.0)
    got = bf16_copies(qo, ko, vo, doo, lse2, moff, delta, stats)
    want = bf16_copies(qo, ko, vo, doo, lse2, moff, delta)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    rows = lambda t: t.reshape(stats.shape[0], -1)  # noqa: E731  [B·Hq, S]
    m = torch.floor(rows(lse2)) - rows(moff).float()
    assert torch.equal(stats[:, 0], rows(qo.scale))
    assert torch.equal(stats[:, 1], m)
    torch.testing.assert_close(stats[:, 2], torch.exp2(m - rows(lse2)), rtol=2e-7, atol=0)
    assert torch.equal(stats[:, 3], rows(delta))
    assert torch.equal(stats[:, 4], rows(doo.scale))
    assert (stats[:, STATS_ROWS - 3:] == -7.0).all()
    with pytest.raises(ValueError, match="query_stats"):
        bf16_copies(qo, ko, vo, doo, lse2, moff, delta, stats[:, :, :128])


@pytest.mark.parametrize("deferred_k", [True, False])
def test_k_major_key_copies_for_an_fp8_dq_product(deferred_k):
    """`bf16_copies(k_t=True)` (launch options ds_out with fp8_dq: dQ an FP8 product against K's bytes K-major): KBF
    and KBBF are K's and its token-block copy's E4M3 bytes as [B, Hkv, D, S] — the bytes of the rows the default
    writes in bf16, transposed, the tokens of each 16 in the fp8 dS buffer's order — and every other output is the
    default's, bit for bit (K's copy deferred and re-quantized in the pass, or given)."""
    spec = AttentionSpec.parse("fp8")
    q, k, v, do = _inputs(2, 4, 2, 384, 128, seed=31 + deferred_k)
    qo, ko, vo, doo, lse2, moff, delta = backward_args(spec, q, k, v, do)[:7]
    ko = _deferred_k(ko) if deferred_k else materialize_off_diagonal(_deferred_k(ko), QZ)
    want = bf16_copies(qo, ko, _deferred(vo), doo, lse2, moff, delta)
    got = bf16_copies(qo, ko, _deferred(vo), doo, lse2, moff, delta, k_t=True)
    for i, name in ((0, "QB"), (3, "VR"), (4, "VBR"), (5, "VBS"), (6, "KB"), (7, "KBS")):
        assert torch.equal(got[i].view(torch.uint8), want[i].view(torch.uint8)), name
    order = (torch.arange(384) // 16 * 16).reshape(-1, 16) + torch.tensor(DS_KEY_ORDER)  # the dS buffer's keys
    order = order.flatten()
    for i, rows, name in ((1, ko.vals, "K8ᵀ"), (2, got[6], "KB8ᵀ")):
        assert got[i].dtype == torch.float8_e4m3fn and got[i].shape == (2, 2, 128, 384), name
        assert torch.equal(got[i].view(torch.uint8), rows.view(torch.uint8).transpose(-1, -2)[..., order]), name
        assert torch.equal(got[i].float().transpose(-1, -2), want[i].float()[..., order, :]), name  # bf16 values
