"""Triton FLAMIA kernels against `reference.attention` with the same spec: O, LSE and every gradient.

Tolerance: relative L2 error <= 3e-3 for O, dQ, dK, dV (measured <= 5e-4 on CPU). The two
paths share the quantized operands bit for bit; what differs is fp32 summation order inside
the products, which can flip a rare P or dS element across a rounding boundary (one fp8 or
bf16 ulp), and the online softmax's per-tile rescaling of l.
"""
import pytest
import torch
from attention_saved import backward_args, reference_backward_inputs, ws_ds_out_launch
from flamia_kernels import AttentionSpec, flamia_attention, reference
from flamia_kernels import attention as attn

TOL = 3e-3


def _inputs(b, hq, hkv, s, d, seed):
    gen = torch.Generator().manual_seed(seed)
    mk = lambda h: torch.randn(b, h, s, d, generator=gen).to(torch.bfloat16).requires_grad_(True)  # noqa: E731
    q, k, v = mk(hq), mk(hkv), mk(hkv)
    do = torch.randn(b, hq, s, d, generator=gen).to(torch.bfloat16)
    return q, k, v, do


def _fwd_bwd(fn, q, k, v, do, spec, causal, safeguards):
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    o = fn(q, k, v, spec, causal, safeguards)
    o.backward(do)
    return o.detach(), q.grad, k.grad, v.grad


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def _bits(x):
    """x as comparable bits: fp8 bytes as uint8 (torch.equal has no fp8 kernel), anything else as it is."""
    return x.view(torch.uint8) if x.dtype == torch.float8_e4m3fn else x


CASES = [  # spec, (B, Hq, Hkv, S, D), causal, safeguards
    ("fp8-bf16dq", (2, 4, 2, 256, 64), True, True),
    ("mxfp8", (2, 4, 2, 256, 64), True, True),
    ("nvfp4", (2, 4, 2, 256, 64), True, True),
    ("nvfp4-fp8", (2, 4, 2, 256, 64), True, True),
    ("fp8-bf16dq", (2, 2, 1, 384, 128), True, True),  # D = 128, S not a power of two
    ("mxfp8", (1, 2, 2, 384, 128), True, True),
    ("qk=fp8,pv=fp8,do=bf16,ds=fp8", (1, 2, 1, 256, 64), True, True),
    ("qk=bf16,pv=mxfp8,do=nvfp4,ds=nvfp4", (1, 2, 1, 256, 64), True, True),
    ("qk=nvfp4,pv=bf16,do=bf16,ds=mxfp8", (1, 2, 1, 256, 64), True, True),
    ("fp8-bf16dq", (1, 2, 1, 256, 64), False, True),  # non-causal
    ("nvfp4-fp8", (1, 2, 1, 256, 64), True, False),  # the leaky variant computes the same leaky math
]


@pytest.mark.parametrize("spec,shape,causal,safeguards", CASES, ids=lambda c: str(c).replace(" ", ""))
def test_triton_matches_reference(spec, shape, causal, safeguards):
    q, k, v, do = _inputs(*shape, seed=sum(shape))
    tri = _fwd_bwd(flamia_attention, q, k, v, do, spec, causal, safeguards)
    ref = _fwd_bwd(reference.attention, q, k, v, do, spec, causal, safeguards)
    for name, a, b in zip(("O", "dQ", "dK", "dV"), tri, ref, strict=True):
        assert torch.isfinite(a).all(), name
        assert _rel(a, b) <= TOL, f"{name}: rel-L2 {_rel(a, b):.2e}"
    assert tri[2].shape == k.shape and tri[3].shape == v.shape


@pytest.mark.parametrize("spec", ["fp8-bf16dq", "nvfp4"])
def test_lse_matches_reference(spec):
    q, k, v, _ = _inputs(2, 2, 1, 256, 64, seed=4)
    o_t, lse_t = attn.attention_lse(q.detach(), k.detach(), v.detach(), spec)
    o_r, lse_r = reference.attention_lse(q.detach(), k.detach(), v.detach(), spec)
    assert _rel(o_t, o_r) <= TOL
    torch.testing.assert_close(lse_t, lse_r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("d,hq,hkv", [(64, 2, 2), (128, 2, 2), (64, 8, 1), (128, 4, 1)])
def test_fp8_saved_activations_at_most_055_of_bf16(d, hq, hkv):
    """What the fp8 forward keeps for the backward vs what a bf16 flash attention keeps
    (Q, K, V, O in bf16 and an fp32 LSE per query row)."""
    q, k, v, _ = _inputs(1, hq, hkv, 128, d, seed=d + hq)
    fp8 = attn.saved_bytes(q, k, v, "fp8-bf16dq")
    bf16 = 2 * (2 * q.numel() + k.numel() + v.numel()) + 4 * q.numel() // d
    assert fp8 <= 0.55 * bf16, f"{fp8} bytes = {fp8 / bf16:.3f} x bf16"


def test_backward_sub_tile_32_matches_reference():
    """The GPU's default backward sub-tile for dS in bf16 (32; the interpreter uses DS_TILE)."""
    from flamia_kernels import attention_bwd

    spec = AttentionSpec.parse("fp8-bf16dq")
    q, k, v, do = _inputs(1, 2, 1, 256, 64, seed=8)
    args = backward_args(spec, q, k, v, do)
    got = attention_bwd.backward(*args, config={"num_warps": 4, "num_stages": 1, "sub": 32})
    want = attention_bwd.backward(*args)
    for a, b in zip(got, want, strict=True):
        assert _rel(a, b) <= TOL
    with pytest.raises(ValueError, match="DS_TILE"):
        attention_bwd.backward(*args[:7], AttentionSpec.parse("qk=fp8,pv=fp8,ds=fp8"), *args[8:],
                               config={"sub": 32})


@pytest.mark.parametrize("spec,causal,safeguards,hq,hkv", [
    ("fp8-bf16dq", True, True, 4, 2), ("fp8-bf16dq", False, True, 2, 1), ("fp8-bf16dq", True, False, 2, 1),
    ("nvfp4-fp8", True, True, 2, 2), ("qk=fp8,pv=fp8,do=fp8,ds=fp8", True, True, 2, 1)])
def test_backward_half_tile_dq_programs_match(spec, causal, safeguards, hq, hkv):
    """Launch option bm = 64 (dQ programs of half the forward's query tile): each row still reads the
    per-token K and V over its whole forward key tile and the token-block copies off it, so dQ is the
    default's (up to the interpreter's fp32 summation order: 1e-6); dK and dV are untouched."""
    from flamia_kernels import attention_bwd

    spec = AttentionSpec.parse(spec)
    q, k, v, do = _inputs(2, hq, hkv, 384, 64, seed=17 + hq)
    args = backward_args(spec, q, k, v, do, causal=causal, safeguards=safeguards)
    base = attention_bwd.backward(*args, config={"num_warps": 4, "num_stages": 1})
    half = attention_bwd.backward(*args, config={"num_warps": 4, "num_stages": 1, "bm": 64})
    assert half[0].abs().sum() > 0 and _rel(half[0], base[0]) <= 1e-6, _rel(half[0], base[0])
    assert torch.equal(half[1], base[1]) and torch.equal(half[2], base[2])
    with pytest.raises(ValueError, match="backward config bm=32: allowed 128"):
        attention_bwd.backward(*args, config={"bm": 32})


def test_backward_dq_stream_option():
    """Launch option dq_stream (the sm_90 fast path's default "high": the dQ kernel on a side stream beside the dK/dV
    kernel): off CUDA there is no side stream, so any allowed value gives the one-stream bits; another value is
    refused before any launch, with the key, the value and what is allowed."""
    from flamia_kernels import attention_bwd

    spec = AttentionSpec.parse("fp8-bf16dq")
    q, k, v, do = _inputs(1, 2, 2, 256, 64, seed=37)
    args = backward_args(spec, q, k, v, do)
    cfg = {"num_warps": 4, "num_stages": 1}
    plain = attention_bwd.backward(*args, config=cfg)
    for value in ("same", "high"):
        got = attention_bwd.backward(*args, config={**cfg, "dq_stream": value})
        assert all(torch.equal(a, b) for a, b in zip(got, plain, strict=True)), value
    with pytest.raises(ValueError, match="backward config dq_stream='fast': allowed None, 'same' or 'high'"):
        attention_bwd.backward(*args, config={**cfg, "dq_stream": "fast"})


def test_backward_ds_out_option():
    """Launch option ds_out (the sm_90 fast path's default: a workspace budget in bytes for the dS buffers of
    `dq_from_ds`): where it does not apply (here: no Gluon kernels off CUDA) the backward keeps its bits for any
    budget; a value that is not a byte count is refused before any launch, naming the key, the value and what is
    allowed. The budget's arithmetic: S² + 128·S bytes a query head, whole K / V heads per chunk."""
    from flamia_kernels import attention_bwd, attention_bwd_gluon

    spec = AttentionSpec.parse("fp8-bf16dq")
    q, k, v, do = _inputs(1, 2, 2, 256, 64, seed=41)
    args = backward_args(spec, q, k, v, do)
    cfg = {"num_warps": 4, "num_stages": 1}
    plain = attention_bwd.backward(*args, config=cfg)
    got = attention_bwd.backward(*args, config={**cfg, "ds_out": attention_bwd.DS_OUT_BUDGET})
    assert all(torch.equal(a, b) for a, b in zip(got, plain, strict=True))
    for bad in (True, -1, 1.5, "4G"):
        with pytest.raises(ValueError, match=r"backward config ds_out=.*: allowed a workspace budget in bytes"):
            attention_bwd.backward(*args, config={**cfg, "ds_out": bad})
    for bad in (True, 0, -2, 2.0, "2"):
        with pytest.raises(ValueError, match=r"backward config ds_chunks=.*: allowed an int >= 1"):
            attention_bwd.backward(*args, config={**cfg, "ds_out": attention_bwd.DS_OUT_BUDGET, "ds_chunks": bad})
    assert attention_bwd_gluon.ds_buffer_bytes(8192) == 8192 ** 2 + 128 * 8192
    head = attention_bwd_gluon.ds_buffer_bytes(8192)
    assert attention_bwd.ds_out_heads(4 * head, 2, 8192) == 2  # two query heads a K / V head
    assert attention_bwd.ds_out_heads(2 * head - 1, 2, 8192) == 0  # not one: the dQ kernel
    assert attention_bwd.ds_out_heads(attention_bwd.DS_OUT_BUDGET, 1, 65536) == 1
    assert attention_bwd.ds_out_heads(attention_bwd.DS_OUT_BUDGET, 1, 81920) == 0
    # an fp8 buffer (with fp8_dq): half the bytes, twice the heads under a budget
    assert 2 * attention_bwd_gluon.ds_buffer_bytes(8192, fp8=True) == head
    assert attention_bwd.ds_out_heads(4 * head, 2, 8192, fp8=True) == 4
    assert attention_bwd.ds_out_heads(attention_bwd.DS_OUT_BUDGET, 1, 81920, fp8=True) == 1


def _no_device_memory(*args, **kwargs):
    """An allocation on a full device (a stand-in for `attention_bwd_gluon.ds_buffer`)."""
    raise torch.OutOfMemoryError("CUDA out of memory (test)")


def test_ds_out_chunks_and_a_full_device(monkeypatch):
    """ds_out's chunks are even (no short tail chunk), and a device without memory for the dS workspace gives None
    — the backward then runs the dQ kernel — with one warning per size naming the bytes and the variable to set."""
    import warnings

    from flamia_kernels import attention_bwd, attention_bwd_gluon

    assert [attention_bwd.even_chunk(most, 64) for most in (78, 63, 32, 19, 1)] == [64, 32, 32, 16, 1]
    assert attention_bwd.even_chunk(19, 32) == 16 and attention_bwd.even_chunk(4, 16) == 4
    buf = attention_bwd.ds_workspace(3, 256, "cpu")
    assert buf.numel() * buf.element_size() == 3 * attention_bwd_gluon.ds_buffer_bytes(256)

    monkeypatch.setattr(attention_bwd_gluon, "ds_buffer", _no_device_memory)
    monkeypatch.setattr(attention_bwd, "_DS_WORKSPACE_WARNED", set())
    with pytest.warns(UserWarning, match=r"no device memory for the attention backward's dS workspace \(\d+ bytes\)"
                      r".*FLAMIA_DS_OUT_BYTES"):
        assert attention_bwd.ds_workspace(3, 256, "cpu") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same size again: no second warning
        assert attention_bwd.ds_workspace(3, 256, "cpu") is None


@pytest.mark.parametrize("heads_per_chunk,chunks,want_chunks,buffers", [
    (4, 1, [range(0, 4)], 1), (3, 1, [range(0, 2), range(2, 4)], 1), (1, 1, [range(i, i + 1) for i in range(4)], 1),
    # ds_chunks: two buffers, each at most half the budget, at least that many chunks
    (4, 2, [range(0, 2), range(2, 4)], 2), (4, 4, [range(i, i + 1) for i in range(4)], 2),
    (3, 2, [range(i, i + 1) for i in range(4)], 2), (1, 2, [range(i, i + 1) for i in range(4)], 1)])
def test_ds_out_runs_the_chunks_it_plans(heads_per_chunk, chunks, want_chunks, buffers, monkeypatch):
    """The backward's host side of ds_out (its kernels are sm_90 only; here they are stand-ins that record their calls
    and mark their rows): under a budget of `heads_per_chunk` K / V heads, each chunk's dK/dV launch fills a buffer
    of that many heads' query heads and its dQ-from-dS launch reads it for the same flat query heads into one dQ; dK
    and dV come back as the tensors the launches wrote. With ds_chunks = n >= 2 the chunks take two buffers in turn,
    each at most half the budget (one buffer where not even two heads fit: the chunks one after the other). B = 2 ×
    Hkv = 2 K / V heads, GQA 2. (On the CPU there is no side stream: the launches' order is the one-stream order.)"""
    from flamia_kernels import attention_bwd, attention_bwd_gluon, attention_dkdv_ws

    spec = AttentionSpec.parse("fp8-bf16dq")
    b, hq, hkv, seq, g = 2, 4, 2, 256, 2
    q, k, v, do = _inputs(b, hq, hkv, seq, 128, seed=47)
    args = backward_args(spec, q, k, v, do)
    calls = []

    def dkdv(q8, k8, v8, do8, copies, stats, tau, sm_scale, fp8_dk=None, ds_out=None, heads=None, out=None,
             fold_k=False, fold_v=False):
        assert not fold_k  # backward_args' K copy is not deferred
        if ds_out is None:  # the two-kernel backward's call: every head, its own outputs
            calls.append(("dkdv", heads, None, None))
            heads, out = range(b * hkv), (torch.empty_like(k8.vals, dtype=torch.bfloat16),
                                          torch.empty_like(k8.vals, dtype=torch.bfloat16))
        else:
            calls.append(("dkdv", heads, ds_out.data_ptr(), ds_out.numel()))
        for h in heads:
            out[0].view(b * hkv, seq, -1)[h] = h + 1
            out[1].view(b * hkv, seq, -1)[h] = -(h + 1)
        return out

    def dq_from_ds(buf, kbf, kbbf, b_, hq_, seq_, sm_scale, heads=None, out=None, rho=None):
        assert rho is None  # a bf16 buffer
        calls.append(("dq", heads, buf.data_ptr()))
        for h in heads:
            out.view(b * hq, seq, -1)[h] = 10 * (h + 1)
        return out

    monkeypatch.setattr(attention_bwd_gluon, "eligible", lambda *a, **kw: None)
    monkeypatch.setattr(attention_dkdv_ws, "dkdv", dkdv)
    monkeypatch.setattr(attention_bwd, "dq_from_ds", dq_from_ds)
    one_head = g * attention_bwd_gluon.ds_buffer_bytes(seq)
    config = {"num_warps": 4, "num_stages": 1, "pre": True, "gluon": True, "ws_dkdv": True, "bn": 64, "sub": 32,
              "dq": "kernel", "ds_out": heads_per_chunk * one_head, "ds_chunks": chunks}
    dq, dk, dv = attention_bwd.backward(*args, config=config)
    want = [call for kv in want_chunks for call in (("dkdv", kv), ("dq", range(kv.start * g, kv.stop * g)))]
    assert [c[:2] for c in calls] == want, calls
    size = len(want_chunks[0]) * g * attention_bwd_gluon.ds_buffer_bytes(seq) // 2  # bf16 elements
    assert all(c[3] == size for c in calls if c[0] == "dkdv")
    filled = [c[2] for c in calls if c[0] == "dkdv"]
    assert len(set(filled)) == buffers and filled == [filled[i % buffers] for i in range(len(filled))], calls
    assert [c[2] for c in calls if c[0] == "dq"] == filled  # each chunk's dQ reads the buffer its dK/dV filled
    assert torch.equal(dk.view(b * hkv, -1)[:, 0], torch.arange(1, b * hkv + 1, dtype=dk.dtype))
    assert torch.equal(dv.view(b * hkv, -1)[:, 0], -torch.arange(1, b * hkv + 1, dtype=dv.dtype))
    assert torch.equal(dq.view(b * hq, -1)[:, 0], 10 * torch.arange(1, b * hq + 1, dtype=dq.dtype))

    # a device without memory for the workspace: one warning, the dQ kernel (here the Triton one) and its dQ
    calls.clear()
    monkeypatch.setattr(attention_bwd, "_DS_WORKSPACE_WARNED", set())
    monkeypatch.setattr(attention_bwd_gluon, "ds_buffer", _no_device_memory)
    with pytest.warns(UserWarning, match="no device memory for the attention backward's dS workspace"):
        dq_full, dk_full, _ = attention_bwd.backward(*args, config=config)
    assert calls == [("dkdv", None, None, None)], calls
    dq_plain = attention_bwd.backward(*args, config={**config, "ds_out": 0})[0]
    assert torch.equal(dq_full, dq_plain) and dq_full.abs().sum() > 0
    assert torch.equal(dk_full.view(b * hkv, -1)[:, 0], torch.arange(1, b * hkv + 1, dtype=dk.dtype))


def _deferred(k, v, v_scales: bool = False):
    """K and V as the autograd backward gets them: both token-block copies deferred, K's block scales known (saved by
    the forward), and with v_scales V's too."""
    from dataclasses import replace

    from flamia_kernels.attention_operands import OffDiagonal

    return (replace(k, off=OffDiagonal(None, k.off.scale, k.off.block)),
            replace(v, off=OffDiagonal(None, v.off.scale if v_scales else None, v.off.block, v.off.transposed)))


@pytest.mark.parametrize("preset", ["fp8-bf16dq", "fp8"])
def test_fold_k_leaves_k_copies_to_the_dkdv_kernel(preset, monkeypatch):
    """Launch option fold_k, host side (the ws dK/dV kernel is sm_90 only; here stand-ins): with K's copy deferred and
    its block scales given, the copies pass runs V's half only, and each chunk's dK/dV launch gets fold_k with the
    KBF / KBBF buffers that chunk's `dq_from_ds` then reads — bf16 rows, or under `fp8` (the FP8 dQ product) K's
    E4M3 bytes K-major. Without the scales, with K's copy present, or without the option, the copies pass runs both
    halves and the kernel gets fold_k=False; a value other than a bool is refused."""
    from flamia_kernels import attention_bwd, attention_bwd_copies, attention_bwd_gluon, attention_dkdv_ws

    spec = AttentionSpec.parse(preset)
    assert attention_bwd.FOLD_K_T  # over the fp8 buffer too, the default since session 32
    b, hq, hkv, seq = 1, 2, 2, 256
    q, k, v, do = _inputs(b, hq, hkv, seq, 128, seed=53)
    args = list(backward_args(spec, q, k, v, do))
    args[1], args[2] = _deferred(args[1], args[2])
    seen = []

    def dkdv(q8, k8, v8, do8, copies, stats, tau, sm_scale, fp8_dk=None, ds_out=None, heads=None, out=None,
             fold_k=False, fold_v=False):
        seen.append(("dkdv", fold_k, copies[2], copies[3], k8.off.vals is None, fold_v, copies[4], copies[5]))
        return out

    def dq_from_ds(buf, kbf, kbbf, b_, hq_, seq_, sm_scale, heads=None, out=None, rho=None):
        seen.append(("dq", kbf, kbbf))
        return out

    launch = attention_bwd_copies._KEY_COPIES_LAUNCH
    halves = []
    monkeypatch.setattr(attention_bwd_copies, "_KEY_COPIES_LAUNCH",
                        lambda grid, a, consts, opts: halves.append((consts["DO_K"], consts["DO_V"]))
                        or launch(grid, a, consts, opts))
    monkeypatch.setattr(attention_bwd_gluon, "eligible", lambda *a, **kw: None)
    monkeypatch.setattr(attention_dkdv_ws, "dkdv", dkdv)
    monkeypatch.setattr(attention_bwd, "dq_from_ds", dq_from_ds)

    attention_bwd.backward(*args, config=ws_ds_out_launch(fold_k=True))
    assert halves == [(False, True)], halves
    (_, fold, kbf, kbbf, deferred, fold_v, vr, vbr), (_, kbf_read, kbbf_read) = seen
    assert not fold_v and vr is not None and vbr is not None  # V's block scales not given: V's half ran
    k_t = spec.dsk == "fp8"
    assert fold and deferred and kbf.dtype == kbbf.dtype == (torch.float8_e4m3fn if k_t else torch.bfloat16)
    assert kbf.shape == kbbf.shape == ((b, hkv, 128, seq) if k_t else (b, hkv, seq, 128))
    assert kbf.data_ptr() != kbbf.data_ptr()
    assert kbf_read is kbf and kbbf_read is kbbf

    no_scales = list(args)
    no_scales[1] = _deferred(args[1], args[2])[0]
    no_scales[1].off.scale = None
    present = list(backward_args(spec, q, k, v, do))
    for case, config in ((args, ws_ds_out_launch()), (no_scales, ws_ds_out_launch(fold_k=True)),
                         (present, ws_ds_out_launch(fold_k=True))):
        halves.clear(), seen.clear()
        attention_bwd.backward(*case, config=config)
        assert halves == [(True, False), (False, True)] and seen[0][1] is False, (halves, seen)
    with pytest.raises(ValueError, match="fold_k='yes'"):
        attention_bwd.backward(*args, config=ws_ds_out_launch(fold_k="yes"))

    # V's block scales given too (as the autograd backward gets them): V's half is the kernel's as well (FOLD_V, the
    # default over the fp8 buffer only), so no key copies launch runs, and the kernel gets fold_v with no VR / VBR;
    # with FOLD_V off for the buffer, V's half runs again
    both = list(backward_args(spec, q, k, v, do))
    both[1], both[2] = _deferred(both[1], both[2], v_scales=True)
    kind = "fp8" if k_t else "bf16"
    assert attention_bwd.FOLD_V == {"fp8": True, "bf16": False}
    for fold_v in (True, False):
        monkeypatch.setattr(attention_bwd, "FOLD_V", {**attention_bwd.FOLD_V, kind: fold_v})
        halves.clear(), seen.clear()
        attention_bwd.backward(*both, config=ws_ds_out_launch(fold_k=True))
        (_, fold, _, _, _, got_fold_v, vr, vbr), _ = seen
        assert fold and got_fold_v is fold_v, seen
        assert (halves, vr, vbr) == ([], None, None) if fold_v else halves == [(False, True)] and vr is not None


@pytest.mark.parametrize("safeguards", [True, False])
def test_forward_saves_k_block_scales(safeguards):
    """The autograd forward saves K's token-block scales (launch option fold_k's kbs) where the backward defers K's
    copy — and they are the scales the backward would re-derive from K's saved per-token bytes (`off_diagonal`) — and
    none where there is no deferred copy (safeguards off: the leaky copy is the operand itself)."""
    from flamia_kernels import quantize as QZ
    from flamia_kernels.attention_operands import Operand, off_diagonal

    q, k, v, _ = _inputs(2, 4, 2, 384, 64, seed=71)
    o = flamia_attention(q, k, v, "fp8-bf16dq", safeguards=safeguards)
    saved = o.grad_fn.saved_tensors
    kbs, vbs = saved[-4], saved[-3]
    if not safeguards:
        assert kbs is None and vbs is None
        return
    want = off_diagonal(Operand(saved[2], saved[3]), 128, QZ, False).scale
    assert kbs.shape == want.shape == (2, 2, 3) and torch.equal(kbs, want) and (kbs > 0).all()
    # and V's (attention_bwd.FOLD_V), from Vᵀ's saved per-token bytes
    want_v = off_diagonal(Operand(saved[4], saved[5], vals_t=saved[4]), 128, QZ, False, True).scale
    assert vbs.shape == want_v.shape == (2, 2, 3) and torch.equal(vbs, want_v) and (vbs > 0).all()
    assert vbs.untyped_storage().data_ptr() == saved[2].untyped_storage().data_ptr()
    # carved with K's saved bytes, not with the token-block copies the forward drops (a saved view would hold them)
    assert kbs.untyped_storage().data_ptr() == saved[2].untyped_storage().data_ptr()
    docs = torch.zeros(2, 384, dtype=torch.int32)
    docs[:, 200:] = 1
    assert flamia_attention(q, k, v, "fp8-bf16dq", doc_ids=docs).grad_fn.saved_tensors[-4:-2] == (None, None)


@pytest.mark.parametrize("b,hq,hkv,seq,pre", [(2, 4, 2, 384, False), (1, 2, 2, 256, True)])
def test_fp8_dq_in_the_triton_dq_kernel_matches_the_reference(b, hq, hkv, seq, pre):
    """Launch option fp8_dq on the Triton dQ kernel (any device; here the interpreter): E4M3(dS·s_k/ρ) against K's
    bytes, ρ from `reference.dq_row_scale`, against `reference.backward_math(fp8_dq=True)` from the same bf16 inputs
    (within bf16's rounding of dQ, where the default's bf16 dS is 3× as far); dK and dV keep the default's bits. GQA,
    B > 1, S not a power of two, with and without the copies pass. Other specs and the atomic dQ are refused."""
    import math

    from flamia_kernels import attention_bwd

    spec = AttentionSpec.parse("fp8-bf16dq")
    q, k, v, do = _inputs(b, hq, hkv, seq, 128, seed=seq + pre)
    sm = 1.0 / math.sqrt(128)
    args = backward_args(spec, q, k, v, do, sm_scale=sm)
    cfg = {"num_warps": 4, "num_stages": 1, "pre": pre}
    want = attention_bwd.backward(*args, config=cfg)
    got = attention_bwd.backward(*args, config={**cfg, "fp8_dq": True})
    assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
    ops, do8, delta, m, linv = reference_backward_inputs(spec, q, k, v, do, sm)
    ref = reference.backward_math(ops, spec, do8, delta, m, linv, True, True, sm, fp8_dq=True)[0]
    rel = lambda a: ((a.float() - ref).norm() / ref.norm()).item()  # noqa: E731
    print(f"\nfp8_dq on the Triton dQ kernel vs the reference's FP8 dQ: rel-L2 {rel(got[0]):.2e} (bf16 dS "
          f"{rel(want[0]):.2e})")
    assert rel(got[0]) < 4e-3 and rel(want[0]) > 3 * rel(got[0]), (rel(got[0]), rel(want[0]))
    with pytest.raises(ValueError, match="fp8_dq=True: the dQ product in FP8 under bound scales needs"):
        attention_bwd.backward(*backward_args(AttentionSpec.parse("mxfp8"), q, k, v, do),
                               config={**cfg, "fp8_dq": True})
    with pytest.raises(ValueError, match=r"and dq='kernel' \(dq='atomic'\)"):
        attention_bwd.backward(*args, config={**cfg, "fp8_dq": True, "dq": "atomic"})


def test_fp8_preset_runs_the_fp8_dq_product():
    """Spec part dsk=fp8 (the preset fp8) makes the FP8 dQ product the default: the backward at its default
    launch gives the bits of fp8 with launch option fp8_dq=True, and fp8's bits with fp8_dq=False; the reference
    follows the spec alike (`backward_math`'s fp8_dq defaults to it). The atomic dQ, which sums bf16 dS, and a fp8_dq
    that is not a bool are refused, naming the key, the value and what is allowed."""
    import math

    from flamia_kernels import attention_bwd

    fp8, dsk = AttentionSpec.parse("fp8-bf16dq"), AttentionSpec.parse("fp8")
    q, k, v, do = _inputs(1, 4, 2, 256, 128, seed=83)
    sm = 1.0 / math.sqrt(128)
    args = backward_args(dsk, q, k, v, do, sm_scale=sm)
    with_fp8 = (*args[:7], fp8, *args[8:])
    cfg = {"num_warps": 4, "num_stages": 1}
    same = lambda a, b: all(torch.equal(x, y) for x, y in zip(a, b, strict=True))  # noqa: E731
    got = attention_bwd.backward(*args, config=cfg)
    assert same(got, attention_bwd.backward(*with_fp8, config={**cfg, "fp8_dq": True}))
    assert same(attention_bwd.backward(*args, config={**cfg, "fp8_dq": False}),
                attention_bwd.backward(*with_fp8, config=cfg))
    assert not torch.equal(got[0], attention_bwd.backward(*with_fp8, config=cfg)[0])
    ops, do8, delta, m, linv = reference_backward_inputs(dsk, q, k, v, do, sm)
    ref = reference.backward_math(ops, dsk, do8, delta, m, linv, True, True, sm)
    assert same(ref, reference.backward_math(ops, fp8, do8, delta, m, linv, True, True, sm, fp8_dq=True))
    assert ((got[0].float() - ref[0]).norm() / ref[0].norm()).item() < 4e-3
    with pytest.raises(ValueError, match=r"and dq='kernel' \(dq='atomic'\)"):
        attention_bwd.backward(*args, config={**cfg, "dq": "atomic"})
    with pytest.raises(ValueError, match=r"fp8_dq=1: allowed True .* or False .*default: the spec's dsk \(fp8\)"):
        attention_bwd.backward(*args, config={**cfg, "fp8_dq": 1})


@pytest.mark.parametrize("causal", [True, False])
def test_fp8_dq_with_documents_matches_the_reference(causal):
    """fp8_dq on the Triton dQ kernel under document masking: ρ bounds each query's keys in its own document
    (`reference.dq_row_scale(doc_index=...)`), and dQ matches `reference.backward_math(fp8_dq=True, doc_ids=...)`
    within bf16's rounding; a document's ρ is the one it gets alone."""
    import math

    from flamia_kernels import attention_bwd, attention_fwd
    from flamia_kernels import quantize as QZ
    from flamia_kernels.attention_operands import Operand, backward_delta, prepare_forward, quantize_operand
    from flamia_kernels.document import doc_tables

    spec = AttentionSpec.parse("fp8-bf16dq")
    b, hq, hkv, seq = 2, 4, 2, 256
    q, k, v, do = _inputs(b, hq, hkv, seq, 128, seed=71 + causal)
    doc_ids = torch.tensor([[0] * 100 + [1] * 156, [0] * 256])
    docs = doc_tables(doc_ids)
    sm = 1.0 / math.sqrt(128)
    ops = prepare_forward(q, k, v, spec, True, QZ, 128, v_transposed=True, off_diagonal=False)
    _, lse2, moff, o8, o_scale = attention_fwd.forward(ops.q, ops.k, ops.v, spec, causal, True, sm, 128, True,
                                                       doc=docs)
    do_op = quantize_operand(do, spec.do, QZ)
    args = (ops.q, ops.k, ops.v, do_op, lse2, moff, backward_delta(do_op, Operand(o8, o_scale)), spec, causal, True,
            sm, 128)
    got = attention_bwd.backward(*args, config={"num_warps": 4, "num_stages": 1, "fp8_dq": True}, doc=docs)
    ref_ops, do8, delta, m, linv = reference_backward_inputs(spec, q, k, v, do, sm, causal, doc_ids)
    ref = reference.backward_math(ref_ops, spec, do8, delta, m, linv, causal, True, sm, doc_ids=doc_ids,
                                  fp8_dq=True)[0]
    assert ((got[0].float() - ref).norm() / ref.norm()).item() < 4e-3
    # the bound of document 1 (tokens 100..255 of batch 0) is the one it gets on its own
    rho = reference.dq_row_scale(do8, delta, linv, ref_ops.k.scale, None, ref_ops.v.scale, None, causal,
                                 doc_index=docs[0])
    alone = lambda x: x[:1, :, 100:]  # noqa: E731
    do_alone = Operand(alone(do8.vals), alone(do8.scale))
    rho_alone = reference.dq_row_scale(do_alone, alone(delta), alone(linv), alone(ref_ops.k.scale), None,
                                       alone(ref_ops.v.scale), None, causal, doc_index=torch.zeros(1, 156))
    assert torch.equal(alone(rho), rho_alone)


def test_fp8_ds_out_hands_the_kernels_their_fp8_operands(monkeypatch):
    """The host side of fp8's ds_out (dsk=fp8: fp8_dq and ds_fp8 by default; the kernels are sm_90 only,
    stand-ins record what they get): the dS buffer
    is fp8 and half the bf16 one's size, the dK/dV kernel finds 1/ρ in its statistics' row DS_IRHO_ROW, and
    `dq_from_ds` gets K's and its copy's bytes K-major in the buffer's key order and ρ — the reference's bound scales —
    for the same query heads. B = 2 × Hkv = 2, GQA 2, one chunk."""
    from flamia_kernels import attention_bwd, attention_bwd_gluon, attention_dkdv_ws
    from flamia_kernels.attention_bwd_gluon import DS_IRHO_ROW, DS_KEY_ORDER

    spec = AttentionSpec.parse("fp8")
    b, hq, hkv, seq = 2, 4, 2, 256
    q, k, v, do = _inputs(b, hq, hkv, seq, 128, seed=53)
    args = backward_args(spec, q, k, v, do)
    seen = {}

    def dkdv(q8, k8, v8, do8, copies, stats, tau, sm_scale, fp8_dk=None, ds_out=None, heads=None, out=None,
             fold_k=False, fold_v=False):
        assert not fold_k  # backward_args gives K's copy: nothing to fold (test_fold_k_leaves_k_copies_...)
        seen.update(buf=ds_out, irho=stats.view(b, hq, -1, seq)[:, :, DS_IRHO_ROW].clone(), k=k8)
        return out

    def dq_from_ds(buf, kbf, kbbf, b_, hq_, seq_, sm_scale, heads=None, out=None, rho=None):
        seen.update(dq_buf=buf, kbf=kbf, kbbf=kbbf, rho=rho, heads=heads)
        return out

    monkeypatch.setattr(attention_bwd_gluon, "eligible", lambda *a, **kw: None)
    monkeypatch.setattr(attention_dkdv_ws, "dkdv", dkdv)
    monkeypatch.setattr(attention_bwd, "dq_from_ds", dq_from_ds)
    attention_bwd.backward(*args, config=ws_ds_out_launch())
    buf = seen["buf"]
    assert buf is seen["dq_buf"] and buf.dtype == torch.float8_e4m3fn and seen["heads"] == range(b * hq)
    assert buf.numel() == b * hq * attention_bwd_gluon.ds_buffer_bytes(seq, fp8=True)
    k8 = seen["k"]
    order = ((torch.arange(seq) // 16 * 16).reshape(-1, 16) + torch.tensor(DS_KEY_ORDER)).flatten()
    for got, rows in ((seen["kbf"], k8.vals), (seen["kbbf"], k8.off.vals)):
        assert got.shape == (b, hkv, 128, seq)
        assert torch.equal(got.view(torch.uint8), rows.view(torch.uint8).transpose(-1, -2)[..., order])
    qo, ko, vo, doo, lse2, moff, delta = args[:7]
    linv = reference.unpack_stats(lse2, moff)[1]
    want = reference.dq_row_scale(doo, delta, linv, k8.scale, k8.off.per_token_scale(), vo.scale,
                                  vo.off.per_token_scale(), True)
    assert torch.equal(seen["rho"], want) and torch.equal(seen["irho"], 1.0 / want)


def test_ds_fp8_false_keeps_the_fp8_dq_product_off_the_ds_buffer(monkeypatch):
    """Launch option ds_fp8=False (fp8's dQ product still FP8) runs it on the dQ kernel: the ws dK/dV kernel
    gets no dS buffer and `dq_from_ds` is not called; ds_fp8 without fp8_dq, or not a bool, is refused naming the
    key, the value and what is allowed."""
    from flamia_kernels import attention_bwd, attention_bwd_gluon, attention_dkdv_ws

    spec = AttentionSpec.parse("fp8")
    q, k, v, do = _inputs(1, 2, 2, 256, 128, seed=59)
    args = backward_args(spec, q, k, v, do)
    seen = []
    monkeypatch.setattr(attention_bwd_gluon, "eligible", lambda *a, **kw: None)
    monkeypatch.setattr(attention_dkdv_ws, "dkdv", lambda *a, ds_out=None, **kw: seen.append(ds_out) or
                        (torch.zeros_like(k), torch.zeros_like(v)))
    monkeypatch.setattr(attention_bwd, "dq_from_ds", lambda *a, **kw: pytest.fail("dq_from_ds ran"))
    config = ws_ds_out_launch(ds_fp8=False)
    dq = attention_bwd.backward(*args, config=config)[0]
    assert seen == [None] and dq.isfinite().all() and dq.abs().sum() > 0  # the Triton dQ kernel's FP8 product
    for bad in ({"ds_fp8": True}, {"fp8_dq": True, "ds_fp8": 1}):
        with pytest.raises(ValueError, match=rf"ds_fp8={bad['ds_fp8']!r} .*allowed True only together with "
                                             rf"fp8_dq=True"):
            attention_bwd.backward(*args, config={**config, "fp8_dq": False, **bad})


def test_ds_out_budget_from_the_environment(monkeypatch):
    """FLAMIA_DS_OUT_BYTES overrides ds_out's default budget (0 turns it off); anything but a byte count is refused
    naming the variable, the value and what is allowed."""
    from flamia_kernels import attention_bwd

    monkeypatch.delenv(attention_bwd.DS_OUT_ENV, raising=False)
    assert attention_bwd.ds_out_budget() == attention_bwd.DS_OUT_BUDGET
    monkeypatch.setenv(attention_bwd.DS_OUT_ENV, "0")
    assert attention_bwd.ds_out_budget() == 0
    monkeypatch.setenv(attention_bwd.DS_OUT_ENV, str(1 << 30))
    assert attention_bwd.ds_out_budget() == 1 << 30
    for bad in ("-1", "4G", ""):
        monkeypatch.setenv(attention_bwd.DS_OUT_ENV, bad)
        with pytest.raises(ValueError, match=rf"FLAMIA_DS_OUT_BYTES='{bad}': allowed a byte count"):
            attention_bwd.ds_out_budget()
    # and a training call refuses it before its forward runs
    q, k, v, _ = _inputs(1, 2, 2, 256, 64, seed=43)
    q.requires_grad_(True)
    with pytest.raises(ValueError, match="FLAMIA_DS_OUT_BYTES='': allowed a byte count"):
        flamia_attention(q, k, v, "fp8-bf16dq")


@pytest.mark.parametrize("causal,safeguards,hq,hkv,half", [
    (True, True, 4, 2, False), (True, True, 2, 1, True), (False, True, 2, 1, False), (True, False, 2, 2, True)])
def test_backward_pre_copies_are_bit_identical(causal, safeguards, hq, hkv, half):
    """Launch option pre (the fp8 fast path's default on sm_90): the kernels read bf16 copies of Q's
    and K's bytes, V's rows and the dV product's scaled dO rows (`attention_bwd_copies`) instead of
    converting them per tile. The same values enter the same products, so every gradient is the
    plain launch's bit for bit, under the half-tile programs and with dP issued late too; a spec
    whose operands are not all fp8 is refused with the option named."""
    from flamia_kernels import attention_bwd

    spec = AttentionSpec.parse("fp8-bf16dq")
    q, k, v, do = _inputs(2, hq, hkv, 384, 64, seed=31 + hq + causal)
    args = backward_args(spec, q, k, v, do, causal=causal, safeguards=safeguards)
    cfg = {"num_warps": 4, "num_stages": 1, "sub": 32, **({"bn": 64, "bm": 64} if half else {})}
    plain = attention_bwd.backward(*args, config=cfg)
    for extra in ({"pre": True}, {"pre": True, "dp_early": False}):
        pre = attention_bwd.backward(*args, config={**cfg, **extra})
        for name, a, b in zip(("dQ", "dK", "dV"), pre, plain, strict=True):
            assert a.abs().sum() > 0 and torch.equal(a, b), f"{name} {extra}: rel-L2 {_rel(a, b):.2e}"
    mixed = AttentionSpec.parse("nvfp4-fp8")
    margs = backward_args(mixed, q, k, v, do, causal=causal, safeguards=safeguards)
    with pytest.raises(ValueError, match="backward config pre=True needs fp8 Q, K, V and dO"):
        attention_bwd.backward(*margs, config={**cfg, "pre": True})


def test_d64_launch_is_one_launch_in_the_kernels_and_the_bench_file(monkeypatch):
    """scripts/launches/d64.json (the benchmarks' --launch) is the launch FAST_D64 gives D = 64 on a GPU, and
    FAST_D64 touches D = 64 only."""
    import json
    from pathlib import Path

    from flamia_kernels import attention_bwd, attention_fwd

    path = Path(__file__).resolve().parents[1] / "scripts" / "launches" / "d64.json"
    assert json.loads(path.read_text()) == {"fwd": attention_fwd.D64_LAUNCH, "bwd": attention_bwd.D64_LAUNCH}
    for mod in (attention_fwd, attention_bwd):
        monkeypatch.setattr(mod, "INTERPRET", False)
    generic_fwd, generic_bwd = attention_fwd.launch_config(64, False), attention_bwd.launch_config(64, "bf16")
    fast128 = attention_fwd.launch_config(128, False), attention_bwd.launch_config(128, "bf16")
    for mod in (attention_fwd, attention_bwd):
        monkeypatch.setattr(mod, "FAST_D64", True)
    assert attention_fwd.launch_config(64, False) == attention_fwd.D64_LAUNCH != generic_fwd
    assert attention_bwd.launch_config(64, "bf16") == {"sub": 32, "dq": "kernel", **attention_bwd.D64_LAUNCH}
    assert attention_bwd.launch_config(64, "bf16") != generic_bwd
    assert (attention_fwd.launch_config(128, False), attention_bwd.launch_config(128, "bf16")) == fast128
    assert attention_fwd.launch_config(64, True) == {"num_warps": 8, "num_stages": 2}  # emulated: unchanged


@pytest.mark.parametrize("launch", ["d64", "pre_only"])
def test_a_default_launch_with_the_copies_falls_back_where_they_cannot_serve(monkeypatch, launch):
    """A default backward launch that reads the copies pass's rows (pre: D = 128's fast path on sm_90, or D = 64's
    under FAST_D64, which scripts/launches/d64.json repeats: test above) gives the plain launch's gradients bit for
    bit, and a spec the copies cannot serve (P·V in bf16) falls back to the plain kernels instead of refusing its own
    defaults; a caller who asks for pre there is still refused (test above)."""
    from flamia_kernels import attention_bwd

    extra = attention_bwd.D64_LAUNCH if launch == "d64" else {"pre": True}
    pre_launch = {"sub": 32, "dq": "kernel", **extra, "num_warps": 4, "num_stages": 1}  # the interpreter's stage
    pre_launch.pop("dq_stages", None)
    monkeypatch.setattr(attention_bwd, "launch_config", lambda d, ds, emulated=False: dict(pre_launch))
    for name in ("fp8-bf16dq", "fp8", "qk=fp8,pv=bf16,do=fp8,ds=bf16"):
        spec = AttentionSpec.parse(name)
        q, k, v, do = _inputs(1, 4, 2, 256, 64, seed=61)
        args = backward_args(spec, q, k, v, do)
        got = attention_bwd.backward(*args)
        plain = attention_bwd.backward(*args, config={"num_warps": 4, "num_stages": 1, "sub": 32, "dq": "kernel"})
        for grad, a, b in zip(("dQ", "dK", "dV"), got, plain, strict=True):
            assert a.abs().sum() > 0 and torch.equal(a, b), f"{name} {grad}: rel-L2 {_rel(a, b):.2e}"


@pytest.mark.parametrize("causal,bm", [(True, 128), (True, 64), (False, 64)])
def test_forward_fused_q_quantization_matches_the_prepass(causal, bm):
    """Launch option fuse_q: the forward kernel quantizes Q's rows itself. It must write the bytes and
    scales of the pre-pass (`quantize.quantize_fp8_per_token`) and then compute what the kernel computes
    from the pre-pass's Q."""
    from flamia_kernels import attention_fwd
    from flamia_kernels import quantize as QZ
    from flamia_kernels.attention_operands import prepare_forward

    spec = AttentionSpec.parse("fp8-bf16dq")
    q, k, v, _ = _inputs(1, 4, 2, 384, 64, seed=31)
    q = q.detach().clone()
    with torch.no_grad():
        q[0, 1, 5] *= 300.0  # an outlier token: its scale must stay its own
    ops = prepare_forward(q, k.detach(), v.detach(), spec, True, QZ, 128, v_transposed=True)
    cfg = {"num_warps": 4, "num_stages": 1, "bm": bm}
    want = attention_fwd.forward(ops.q, ops.k, ops.v, spec, causal, True, 0.125, 128, True, config=cfg)
    fused_q = attention_fwd.fused_q_operand(q)
    got = attention_fwd.forward(fused_q, ops.k, ops.v, spec, causal, True, 0.125, 128, True, config=cfg, q_raw=q)
    assert torch.equal(fused_q.vals.view(torch.uint8), ops.q.vals.view(torch.uint8))
    assert torch.equal(fused_q.scale, ops.q.scale)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(_bits(a), _bits(b))
    with pytest.raises(ValueError, match="fused Q quantization needs an fp8 qk with per-token Q"):
        attention_fwd.forward(fused_q, ops.k, ops.v, spec, causal, False, 0.125, 128, True, config=cfg, q_raw=q)


@pytest.mark.parametrize("causal,bm", [(True, 128), (True, 64), (False, 64)])
def test_forward_reads_v_copy_in_p_register_order(causal, bm):
    """V's token-block copy in `formats.p_register_order` (what the sm_90 Gluon kernel reads, `OffDiagonal.p_order`):
    the Triton kernel puts P's columns in the same order and computes the same O, row statistics and O copy, bit for
    bit (the interpreter's products are exact sums of the same terms)."""
    from flamia_kernels import attention_fwd
    from flamia_kernels import quantize as QZ
    from flamia_kernels.attention_operands import prepare_forward

    spec = AttentionSpec.parse("fp8")
    q, k, v, _ = _inputs(1, 4, 2, 384, 128, seed=37)
    q, k, v = q.detach(), k.detach(), v.detach()
    cfg = {"num_warps": 4, "num_stages": 1, "bm": bm}
    ops = prepare_forward(q, k, v, spec, True, QZ, 128, v_transposed=True)
    want = attention_fwd.forward(ops.q, ops.k, ops.v, spec, causal, True, 128 ** -0.5, 128, True, config=cfg)
    ops_p = prepare_forward(q, k, v, spec, True, QZ, 128, v_transposed=True, v_p_order=True)
    assert ops_p.v.off.p_order
    got = attention_fwd.forward(ops_p.q, ops_p.k, ops_p.v, spec, causal, True, 128 ** -0.5, 128, True, config=cfg)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(_bits(a), _bits(b))
    # and a copy in the wrong order is read wrongly: the test would see a kernel that ignored the flag
    ops_p.v.off.p_order = False
    wrong = attention_fwd.forward(ops_p.q, ops_p.k, ops_p.v, spec, causal, True, 128 ** -0.5, 128, True, config=cfg)
    assert _rel(wrong[0], want[0]) > 1e-2


def test_orders_v_copy_where_the_gluon_kernel_reads_it(monkeypatch):
    """`attention_fwd.orders_v_copy`: only where the sm_90 Gluon kernel runs (so never on the CPU) with an fp8 `pv`
    and safeguards on, as `attention_fwd_gluon.P_ORDER` says unless the launch option p_order says otherwise."""
    from flamia_kernels import attention_fwd, attention_fwd_gluon

    q = torch.zeros(1, 2, 256, 128, dtype=torch.bfloat16)
    fp8 = AttentionSpec.parse("fp8")
    assert not attention_fwd.orders_v_copy(q, fp8, True, True, False)  # CPU: no Gluon
    default = attention_fwd.launch_config
    monkeypatch.setattr(attention_fwd_gluon, "unsupported", lambda *a: None)  # as on an sm_90 GPU
    monkeypatch.setattr(attention_fwd, "launch_config", lambda d, e: {**default(d, e), "gluon": True})
    assert attention_fwd.orders_v_copy(q, fp8, True, True, False) is attention_fwd_gluon.P_ORDER
    monkeypatch.setattr(attention_fwd_gluon, "P_ORDER", False)  # the default off: only the launch option turns it on
    assert not attention_fwd.orders_v_copy(q, fp8, True, True, False)
    monkeypatch.setattr(attention_fwd, "launch_config", lambda d, e: {**default(d, e), "gluon": True,
                                                                      "p_order": True})
    assert attention_fwd.orders_v_copy(q, fp8, True, True, False)
    monkeypatch.setattr(attention_fwd_gluon, "P_ORDER", True)
    monkeypatch.setattr(attention_fwd, "launch_config", lambda d, e: {**default(d, e), "gluon": True})
    assert attention_fwd.orders_v_copy(q, fp8, True, True, False)
    assert not attention_fwd.orders_v_copy(q, fp8, True, False, False)  # leaky: the copy is the operand
    assert not attention_fwd.orders_v_copy(q, AttentionSpec.parse("qk=fp8,pv=bf16,do=bf16,ds=bf16"), True, True, False)
    monkeypatch.setattr(attention_fwd, "launch_config", lambda d, e: {**default(d, e), "gluon": False})
    assert not attention_fwd.orders_v_copy(q, fp8, True, True, False)  # the Triton kernel: key order
    monkeypatch.setattr(attention_fwd, "launch_config", lambda d, e: {**default(d, e), "gluon": True,
                                                                      "p_order": False})
    assert not attention_fwd.orders_v_copy(q, fp8, True, True, False)


def test_fused_q_without_grad_writes_no_q_bytes():
    """save_q=False (what flamia_attention passes where nothing will be differentiated): the fused forward computes
    the same O and row statistics bit for bit and leaves Q's bytes and scales as they were (here a pattern no
    quantizer writes), since only the backward reads them."""
    from flamia_kernels import attention_fwd
    from flamia_kernels import quantize as QZ
    from flamia_kernels.attention_operands import prepare_forward

    spec = AttentionSpec.parse("fp8")
    q, k, v, _ = _inputs(1, 4, 2, 384, 64, seed=53)
    q, k, v = q.detach(), k.detach(), v.detach()
    ops = prepare_forward(q, k, v, spec, True, QZ, 128, v_transposed=True, quantize_q=False)
    cfg = {"num_warps": 4, "num_stages": 1, "bm": 64}
    saved, skipped = attention_fwd.fused_q_operand(q), attention_fwd.fused_q_operand(q)
    skipped.vals.view(torch.uint8).fill_(0x7F)  # E4M3's NaN: never a quantizer's byte for finite Q
    skipped.scale.fill_(-1.0)
    want = attention_fwd.forward(saved, ops.k, ops.v, spec, True, True, 0.125, 128, False, config=cfg, q_raw=q)
    got = attention_fwd.forward(skipped, ops.k, ops.v, spec, True, True, 0.125, 128, False, config=cfg, q_raw=q,
                                save_q=False)
    for a, b in zip(got[:3], want[:3], strict=True):
        assert torch.equal(a, b)
    assert (skipped.vals.view(torch.uint8) == 0x7F).all() and (skipped.scale == -1.0).all()
    assert not (saved.vals.view(torch.uint8) == 0x7F).any() and (saved.scale > 0).all()


def test_flamia_attention_skips_q_bytes_only_without_grad(monkeypatch):
    """flamia_attention tells the forward to write Q's bytes (save_q) exactly where a backward will read them."""
    from flamia_kernels import attention_fwd

    seen = []
    original = attention_fwd.forward
    monkeypatch.setattr(attention_fwd, "forward", lambda *a, **kw: seen.append(kw.get("save_q")) or original(*a, **kw))
    q, k, v, _ = _inputs(1, 2, 2, 256, 64, seed=59)
    with torch.no_grad():
        flamia_attention(q, k, v, "fp8")
    flamia_attention(q.detach(), k.detach(), v.detach(), "fp8")  # no input needs a gradient
    flamia_attention(q.detach().requires_grad_(True), k.detach(), v.detach(), "fp8")
    assert seen == [False, False, True]


@pytest.mark.parametrize("n_m,n_bh", [(30, 16), (4, 5), (128, 64), (1, 3)])
@pytest.mark.parametrize("head_chunk", [0, 1, 3, 8, 64])
def test_gluon_launch_order_covers_every_program_once(n_m, n_bh, head_chunk):
    """`attention_fwd_gluon.launch_order` (the Gluon forward's `_program_tile`, in Python): every (row block, head)
    exactly once; head after head with the longest rows first for 0 (the order before the option); with groups,
    a group's heads in turn, each head's rows longest first, and the groups in head order."""
    from flamia_kernels.attention_fwd_gluon import launch_order

    order = launch_order(n_m, n_bh, head_chunk)
    assert sorted(order) == [(m, h) for m in range(n_m) for h in range(n_bh)]
    if head_chunk == 0:
        assert order == [(n_m - 1 - i, h) for h in range(n_bh) for i in range(n_m)]
        return
    for h in range(n_bh):  # each head's rows longest first, its group before the next group's
        rows = [m for m, bh in order if bh == h]
        assert rows == sorted(rows, reverse=True)
    group = [bh // head_chunk for _, bh in order]
    assert group == sorted(group)
    first = order[:min(head_chunk, n_bh)]  # the first group's longest rows start first
    assert first == [(n_m - 1, h) for h in range(min(head_chunk, n_bh))]


def test_gluon_launch_order_refuses_a_negative_group():
    from flamia_kernels.attention_fwd_gluon import launch_order

    with pytest.raises(ValueError, match="head_chunk=-1"):
        launch_order(4, 4, -1)


def test_launches_dependent_only_where_the_gluon_kernel_runs(monkeypatch):
    """`attention_fwd.launches_dependent` (the key-sides pass lets the forward start early): never on the CPU, and
    on an sm_90 GPU as the launch option pdl says, `attention_fwd_gluon.PDL` by default."""
    from flamia_kernels import attention_fwd, attention_fwd_gluon

    q = torch.zeros(1, 2, 256, 128, dtype=torch.bfloat16)
    fp8 = AttentionSpec.parse("fp8")
    assert not attention_fwd.launches_dependent(q, fp8, True, True, False)
    default = attention_fwd.launch_config
    monkeypatch.setattr(attention_fwd_gluon, "unsupported", lambda *a: None)  # as on an sm_90 GPU
    monkeypatch.setattr(attention_fwd, "launch_config", lambda d, e: {**default(d, e), "gluon": True})
    assert attention_fwd.launches_dependent(q, fp8, True, True, False) is attention_fwd_gluon.PDL
    for pdl in (True, False):
        monkeypatch.setattr(attention_fwd, "launch_config", lambda d, e, pdl=pdl: {**default(d, e), "gluon": True,
                                                                                   "pdl": pdl})
        assert attention_fwd.launches_dependent(q, fp8, True, True, False) is pdl
    monkeypatch.setattr(attention_fwd, "launch_config", lambda d, e: {**default(d, e), "gluon": False, "pdl": True})
    assert not attention_fwd.launches_dependent(q, fp8, True, True, False)  # the Triton kernel


def test_forward_plan_reads_the_launch_config_once(monkeypatch):
    """`attention_fwd.plan`: one read of the launch config decides the three choices made before the pre-pass, and
    each agrees with its own function (`fuses_q`, `orders_v_copy`, `launches_dependent`), on the CPU and as on an
    sm_90 GPU."""
    from flamia_kernels import attention_fwd, attention_fwd_gluon

    q = torch.zeros(1, 2, 256, 128, dtype=torch.bfloat16)
    default, reads = attention_fwd.launch_config, []
    monkeypatch.setattr(attention_fwd, "launch_config", lambda d, e: reads.append(d) or default(d, e))
    for spec in ("fp8", "qk=fp8,pv=bf16,do=bf16,ds=bf16", "bf16"):
        spec = AttentionSpec.parse(spec)
        for safeguards in (True, False):
            reads.clear()
            plan = attention_fwd.plan(q, spec, True, safeguards, False)
            assert len(reads) == 1
            assert plan == attention_fwd.ForwardPlan(attention_fwd.fuses_q(q, spec, True, safeguards, False),
                                                     attention_fwd.orders_v_copy(q, spec, True, safeguards, False),
                                                     attention_fwd.launches_dependent(q, spec, True, safeguards, False))
    fp8 = AttentionSpec.parse("fp8")
    assert attention_fwd.plan(q, fp8, True, True, False) == attention_fwd.ForwardPlan(False, False, False)  # CPU
    monkeypatch.setattr(attention_fwd_gluon, "unsupported", lambda *a: None)  # as on an sm_90 GPU
    monkeypatch.setattr(attention_fwd, "launch_config", lambda d, e: {**default(d, e), "gluon": True})
    assert attention_fwd.plan(q, fp8, True, True, False) == attention_fwd.ForwardPlan(
        True, attention_fwd_gluon.P_ORDER, attention_fwd_gluon.PDL)
    assert attention_fwd.plan(q, fp8, True, False, False) == attention_fwd.ForwardPlan(
        False, False, attention_fwd_gluon.PDL)  # leaky: Q through the pre-pass, V's copy is the operand


def test_fused_q_launch_option_end_to_end(monkeypatch):
    """flamia_attention under the fuse_q launch option: the same outputs and gradients bit for bit."""
    from flamia_kernels import attention_fwd

    q, k, v, do = _inputs(2, 4, 2, 256, 64, seed=33)
    base = _fwd_bwd(flamia_attention, q, k, v, do, "fp8-bf16dq", True, True)
    default = attention_fwd.launch_config
    monkeypatch.setattr(attention_fwd, "launch_config", lambda d, emulated: {**default(d, emulated), "fuse_q": True})
    fused = _fwd_bwd(flamia_attention, q, k, v, do, "fp8-bf16dq", True, True)
    for a, b in zip(fused, base, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("spec", ["fp8-bf16dq", "qk=fp8,pv=fp8,do=bf16,ds=bf16"])
def test_forward_without_gradients_skips_the_saved_copies(spec, monkeypatch):
    """A forward nothing will differentiate (no_grad, or inputs without requires_grad) returns the same
    O bit for bit, but the kernel writes no fp8 copy of O (it only feeds the backward's delta) and the
    op keeps no saved tensors: inference pays for the forward alone."""
    from flamia_kernels import attention_fwd

    q, k, v, do = _inputs(1, 4, 2, 256, 64, seed=41)
    want = _fwd_bwd(flamia_attention, q, k, v, do, spec, True, True)[0]
    calls, original = [], attention_fwd.forward
    monkeypatch.setattr(attention_fwd, "forward", lambda *a, **kw: calls.append(a[8]) or original(*a, **kw))
    with torch.no_grad():
        o = flamia_attention(q, k, v, spec)
    plain = flamia_attention(q.detach(), k.detach(), v.detach(), spec)
    assert torch.equal(o, want) and torch.equal(plain, want)
    assert calls == [False, False]  # save_o8
    assert o.grad_fn is None and plain.grad_fn is None


def test_fuses_q_follows_the_launch_option_and_the_spec(monkeypatch):
    """Where the forward quantizes Q itself: never for a leaky forward (token-block Q) or a non-fp8 qk; the
    launch option "fuse_q" when set either way; else only where the sm_90 Gluon kernel runs (never on the
    CPU, whose interpreter has no Gluon)."""
    from flamia_kernels import attention_fwd

    q = torch.zeros(1, 2, 256, 128, dtype=torch.bfloat16)
    fp8, nvfp4_fp8 = AttentionSpec.parse("fp8-bf16dq"), AttentionSpec.parse("nvfp4-fp8")
    assert not attention_fwd.fuses_q(q, fp8, True, True, False)  # CPU: the Triton kernel, the pre-pass's Q
    default = attention_fwd.launch_config
    for option in (True, False):
        monkeypatch.setattr(attention_fwd, "launch_config", lambda d, e, o=option: {**default(d, e), "fuse_q": o})
        assert attention_fwd.fuses_q(q, fp8, True, True, False) is option
        assert attention_fwd.fuses_q(q, nvfp4_fp8, False, True, True) is option  # fp8 qk: the option decides
        assert not attention_fwd.fuses_q(q, fp8, True, False, False)  # leaky: Q has token-block scales
        assert not attention_fwd.fuses_q(q, AttentionSpec.parse("mxfp8"), True, True, False)


def test_half_tile_launches_combine_with_the_other_options():
    """The sm_90 fast-path defaults (half-tile programs) under the benchmark options: the forward's
    block-pointer loads, and dQ added atomically from half-tile dK/dV programs."""
    from flamia_kernels import attention_bwd

    spec = AttentionSpec.parse("fp8-bf16dq")
    plain, both = _forward_launches(spec, True, True, 29, {"bm": 64, "BPTR": True})
    assert _rel(both[0], plain[0]) <= 1e-6 and torch.equal(both[2], plain[2])
    q, k, v, do = _inputs(1, 4, 2, 384, 64, seed=29)
    args = backward_args(spec, q, k, v, do)
    want = attention_bwd.backward(*args, config={"num_warps": 4, "num_stages": 1, "sub": 32})
    got = attention_bwd.backward(*args, config={"num_warps": 4, "num_stages": 1, "sub": 32, "bn": 64, "bm": 64,
                                                "dq": "atomic"})
    for a, b in zip(got, want, strict=True):
        assert a.abs().sum() > 0 and _rel(a, b) <= 1e-3, _rel(a, b)


def test_backward_dq_kernel_has_its_own_launch():
    """dq_sub / dq_warps / dq_stages launch the dQ kernel apart from the dK/dV kernel (bench sweeps time
    each alone): dQ's key sub-tiles change only its fp32 summation order; dK and dV are untouched."""
    from flamia_kernels import attention_bwd

    spec = AttentionSpec.parse("fp8-bf16dq")
    q, k, v, do = _inputs(1, 2, 1, 256, 64, seed=12)
    args = backward_args(spec, q, k, v, do)
    want = attention_bwd.backward(*args)
    got = attention_bwd.backward(*args, config={"num_warps": 4, "num_stages": 1, "dq_sub": 32, "dq_warps": 4,
                                                "dq_stages": 1})
    assert _rel(got[0], want[0]) <= TOL and got[0].abs().sum() > 0
    assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
    with pytest.raises(ValueError, match="dq_sub=32: dS format fp8 fixes the backward sub-tile at DS_TILE"):
        attention_bwd.backward(*args[:7], AttentionSpec.parse("qk=fp8,pv=fp8,ds=fp8"), *args[8:],
                               config={"dq_sub": 32})
    with pytest.raises(ValueError, match="dq_sub=48: allowed 16, 32, 64 or 128"):
        attention_bwd.backward(*args, config={"dq_sub": 48})


@pytest.mark.parametrize("spec,causal,hq,hkv", [("fp8-bf16dq", True, 4, 2), ("fp8-bf16dq", False, 2, 1),
                                                  ("nvfp4-fp8", True, 2, 2), ("mxfp8", True, 2, 1)])
def test_backward_atomic_dq_matches_the_dq_kernel(spec, causal, hq, hkv):
    """dS in bf16: dQ summed atomically in the dK/dV kernel (config dq="atomic") against the default
    separate dQ kernel, on the same saved operands; dK and dV are the same kernel either way."""
    from flamia_kernels import attention_bwd

    spec = AttentionSpec.parse(spec)
    assert attention_bwd.launch_config(64, spec.ds)["dq"] == "kernel"
    q, k, v, do = _inputs(2, hq, hkv, 384, 64, seed=11 + hq)
    args = backward_args(spec, q, k, v, do, causal=causal)
    split = attention_bwd.backward(*args, config={"num_warps": 4, "num_stages": 1, "dq": "kernel"})
    fused = attention_bwd.backward(*args, config={"num_warps": 4, "num_stages": 1, "dq": "atomic"})
    assert fused[0].abs().sum() > 0
    assert _rel(fused[0], split[0]) <= 1e-3, f"dQ: rel-L2 {_rel(fused[0], split[0]):.2e}"
    assert torch.equal(fused[1], split[1]) and torch.equal(fused[2], split[2])


def test_backward_atomic_dq_refused_in_deterministic_mode():
    q, k, v, _ = _inputs(1, 2, 1, 128, 64, seed=3)
    was = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        with pytest.raises(RuntimeError, match="dq='atomic'.*run-dependent order.*use dq='kernel'"):
            _backward_with(AttentionSpec.parse("fp8-bf16dq"), q, k, v, {"dq": "atomic"})
    finally:
        torch.use_deterministic_algorithms(was)


def test_backward_atomic_dq_refuses_scaled_ds():
    """fp8 / nvfp4 dS has scale groups along keys: only the dQ kernel computes it."""
    q, k, v, _ = _inputs(1, 2, 1, 128, 64, seed=3)
    with pytest.raises(ValueError, match="dq='atomic' needs dS in bf16.*ds=fp8"):
        _backward_with(AttentionSpec.parse("qk=fp8,pv=fp8,ds=fp8"), q, k, v, {"dq": "atomic"})
    with pytest.raises(ValueError, match="dq='fast'.*allowed kernel, atomic"):
        _backward_with(AttentionSpec.parse("fp8-bf16dq"), q, k, v, {"dq": "fast"})


def _forward_launches(spec, causal: bool, safeguards: bool, seed: int, variant: dict):
    """The forward kernel's outputs on the same quantized operands, under the interpreter's launch and
    under `variant` (launch options) on top of it."""
    from flamia_kernels import attention_fwd
    from flamia_kernels import quantize as QZ
    from flamia_kernels.attention_operands import prepare_forward

    q, k, v, _ = _inputs(1, 4, 2, 384, 64, seed=seed)
    ops = prepare_forward(q.detach(), k.detach(), v.detach(), spec, safeguards, QZ, 128, v_transposed=True)
    run = lambda cfg: attention_fwd.forward(ops.q, ops.k, ops.v, spec, causal, safeguards, 0.125, 128, True,  # noqa
                                            config={"num_warps": 4, "num_stages": 1, **cfg})
    return run({}), run(variant)


@pytest.mark.parametrize("spec,causal", [("fp8-bf16dq", True), ("fp8-bf16dq", False), ("nvfp4-fp8", True),
                                         ("mxfp8", True)])
def test_forward_block_pointer_option_is_bit_identical(spec, causal):
    """Launch option BPTR (block-pointer K / Vᵀ loads off the diagonal) reads the same bytes."""
    plain, bptr = _forward_launches(AttentionSpec.parse(spec), causal, True, 21, {"BPTR": True})
    for a, b in zip(plain, bptr, strict=True):
        assert (a is None and b is None) or torch.equal(a, b)


@pytest.mark.parametrize("spec,causal,safeguards", [("fp8-bf16dq", True, True), ("fp8-bf16dq", False, True),
                                                   ("fp8-bf16dq", True, False), ("nvfp4-fp8", True, True),
                                                   ("mxfp8", False, True)])
def test_forward_half_tile_programs_match(spec, causal, safeguards):
    """Launch option bm = 64 (programs of half the tile's query rows): every row meets the same key
    tiles in the same order with the same scales, so O, the statistics and O's fp8 copy are the
    default's (the interpreter's fp32 products may sum a 64-row block in another order: 1e-6)."""
    spec = AttentionSpec.parse(spec)
    base, half = _forward_launches(spec, causal, safeguards, 23, {"bm": 64})
    assert _rel(half[0], base[0]) <= 1e-6 and torch.equal(half[2], base[2])  # O; M offsets
    torch.testing.assert_close(half[1], base[1], rtol=1e-6, atol=1e-6)  # lse2
    if base[3] is not None:
        assert (half[3].view(torch.uint8) != base[3].view(torch.uint8)).float().mean() <= 1e-3
    with pytest.raises(ValueError, match="forward config bm=32: allowed 128 .* or 64"):
        _forward_launches(spec, causal, safeguards, 23, {"bm": 32})


@pytest.mark.parametrize("spec,causal,safeguards,hq,hkv", [
    ("fp8-bf16dq", True, True, 4, 2), ("fp8-bf16dq", False, True, 2, 1), ("nvfp4-fp8", True, True, 2, 2),
    ("mxfp8", True, True, 2, 1), ("fp8-bf16dq", True, False, 2, 1),
    ("qk=fp8,pv=bf16,do=fp8,ds=bf16", True, True, 2, 1)])
def test_backward_half_tile_programs_match(spec, causal, safeguards, hq, hkv):
    """Launch option bn = 64 (dK/dV programs of half the forward's key tile, the V fold's row
    factors precomputed over the whole tile) gives the default's dK, dV: the same arithmetic,
    though the interpreter's fp32 matmul of a 64-row tile may sum in another order than a
    128-row one (measured 3.3e-5 non-causal, where that moves an fp8 P byte or two; 0 causal)."""
    from flamia_kernels import attention_bwd

    spec = AttentionSpec.parse(spec)
    q, k, v, do = _inputs(1, hq, hkv, 384, 64, seed=31 + hq)
    args = backward_args(spec, q, k, v, do, causal=causal, safeguards=safeguards)
    full = attention_bwd.backward(*args, config={"num_warps": 4, "num_stages": 1})
    half = attention_bwd.backward(*args, config={"num_warps": 4, "num_stages": 1, "bn": 64})
    assert full[1].abs().sum() > 0 and full[2].abs().sum() > 0
    assert torch.equal(half[0], full[0])  # dQ: its own kernel, untouched
    for name, a, b in zip(("dK", "dV"), half[1:], full[1:], strict=True):
        assert _rel(a, b) <= 2e-4, f"{name}: rel-L2 {_rel(a, b):.2e}"


def test_backward_half_tile_option_errors():

    spec = AttentionSpec.parse("fp8-bf16dq")
    q, k, v, _ = _inputs(1, 2, 1, 128, 64, seed=3)
    with pytest.raises(ValueError, match="bn=32: allowed 128 .* or 64"):
        _backward_with(spec, q, k, v, {"bn": 32, "sub": 32})
    with pytest.raises(ValueError, match="bn=64 with document masking"):
        _backward_with(spec, q, k, v, {"bn": 64}, doc=(None, None, None))


def _backward_with(spec, q, k, v, config, doc=None):
    """backward() on unit-scale stand-in operands: for the launch-config checks that fail before any kernel."""
    from flamia_kernels import attention_bwd
    from flamia_kernels.attention_operands import Operand

    b, h, s, d = q.shape
    op = Operand(q.detach(), torch.ones(b, h, s))
    kv = Operand(k.detach(), torch.ones(b, k.shape[1], s), vals_t=k.detach().transpose(2, 3))
    stats = torch.zeros(b, h, s)
    return attention_bwd.backward(op, kv, kv, op, stats, stats, stats, spec, True, True, 0.125, 128,
                                  config=config, doc=doc)


def test_mx_parts_keep_the_format_and_the_interpreter_refuses_them():
    """prepare_forward(mx_parts=True): mxfp8 Q and K keep their E4M3 bytes and E8M0 codes, whose
    dequantization is exactly `vals`; the block-scaled product they feed has no interpreter path."""
    from flamia_kernels import attention_fwd
    from flamia_kernels import formats as FM
    from flamia_kernels import quantize as QZ
    from flamia_kernels.attention_operands import prepare_forward

    spec = AttentionSpec.parse("mxfp8")
    q, k, v, _ = _inputs(1, 2, 1, 128, 64, seed=5)
    ops = prepare_forward(q.detach(), k.detach(), v.detach(), spec, True, QZ, 128, v_transposed=True, mx_parts=True)
    for op in (ops.q, ops.k):
        x8, e8m0 = op.mx
        assert x8.dtype == torch.float8_e4m3fn and e8m0.dtype == torch.uint8 and e8m0.shape[-1] == 64 // 32
        assert torch.equal(FM.dequantize_mxfp8(x8, e8m0).to(torch.bfloat16), op.vals)
    assert ops.v.mx is None
    leaky = prepare_forward(q.detach(), k.detach(), v.detach(), spec, False, QZ, 128, mx_parts=True)
    assert leaky.q.mx is None  # token-block pre-scaled (leaky) values are not the format's parts
    with pytest.raises(ValueError, match="block-scaled QKᵀ .* no interpreter path"):
        attention_fwd.forward(ops.q, ops.k, ops.v, spec, True, True, 0.125, 128, True)


def test_cpu_without_interpreter_runs_the_reference(monkeypatch):
    """Dispatch: where Triton cannot run, a quantized spec runs reference.attention."""
    q, k, v, do = _inputs(1, 2, 1, 128, 64, seed=9)
    monkeypatch.setattr(attn, "can_run_triton", lambda x: False)
    got = _fwd_bwd(flamia_attention, q, k, v, do, "fp8-bf16dq", True, True)
    want = _fwd_bwd(reference.attention, q, k, v, do, "fp8-bf16dq", True, True)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bf16_spec_is_sdpa_with_gqa(dtype):
    """The bf16 spec runs SDPA (any float dtype, GQA expanded), differentiable."""
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, 40, 16, generator=gen, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(2, 2, 40, 16, generator=gen, dtype=dtype, requires_grad=True) for _ in range(2))
    o = flamia_attention(q, k, v, AttentionSpec())
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True)
    torch.testing.assert_close(o, want)
    o.sum().backward()
    assert o.dtype == dtype and k.grad.shape == k.shape
