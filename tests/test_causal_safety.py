"""FLAMIA.md causal-safety tests 1, 2, 3 and 5, for every quantized preset, Triton and reference.

Test 2 (forward prefix): perturb Q, K or V at positions > t (fresh random values, ×1e3
outliers, or a 2^-20 token at t followed by 1.0 at t+1 in the same block); O[:t+1] and the
LSE must be bit-identical. Test 3 (backward prefix): with dO[t+1:] = 0 and the same
perturbations, dQ, dK, dV[:t+1] are bit-identical and every gradient at positions > t is 0.
Test 5: with safeguards=False (the deliberately leaky variant) the same checks must fail.

All variants of one preset run as one batch (each batch row an independent sequence, the
kernels' tiling identical for all), which keeps the interpreter's cost to one launch each.
The bf16 preset (SDPA, nothing quantized) has nothing to leak; it is covered by test 2 once.
"""
import random

import pytest
import torch
from flamia_kernels import PRESETS, SEQ_BLOCK, flamia_attention, reference
from flamia_kernels import formats as F
from flamia_kernels.attention_operands import quantize_operand

QUANTIZED = ["fp8", "fp8-bf16dq", "mxfp8", "nvfp4", "nvfp4-fp8"]  # every quantized preset
SEQ, DIM = 2 * SEQ_BLOCK, 64
EDGES = [0, 1, 15, 16, 31, 32, 63, 64, SEQ_BLOCK - 1, SEQ_BLOCK]
OPS = ("q", "k", "v")


def _t_values(seed: int, seq: int = SEQ) -> list[int]:
    extra = [seq // 2 - 1, seq // 2] if seq > SEQ else []
    return EDGES + extra + [random.Random(seed).randrange(SEQ_BLOCK + 1, seq - 2)]


KINDS = ("random", "outlier", "tiny-then-one")


def _variants(ts, gen, kinds_for_t=lambda i: KINDS, seq: int = SEQ):
    """Batch of sequences and (base row, perturbed row, t, label) pairs (module docstring).

    `kinds_for_t(i)`: the perturbation kinds applied at the i-th t, each to Q, K and V.
    """
    rows, pairs = [], []

    def add(triple):
        rows.append(triple)
        return len(rows) - 1

    for n, t in enumerate(ts):  # a base per t: its dO is zero beyond t
        kinds = kinds_for_t(n)
        base = [torch.randn(seq, DIM, generator=gen) for _ in OPS]
        b0 = add(base)
        tiny = [x.clone() for x in base]
        for x in tiny:
            x[t] *= 2.0**-20
        b1 = add(tiny) if "tiny-then-one" in kinds else None
        for i, name in enumerate(OPS):
            if "random" in kinds:
                fresh = [x.clone() for x in base]
                fresh[i][t + 1:] = torch.randn(seq - t - 1, DIM, generator=gen)
                pairs.append((b0, add(fresh), t, f"{name}-random"))
            if "outlier" in kinds:
                big = [x.clone() for x in base]
                big[i][t + 1:] *= 1e3
                pairs.append((b0, add(big), t, f"{name}-outlier"))
            if b1 is not None:
                step = [x.clone() for x in tiny]
                step[i][t + 1] = 1.0
                pairs.append((b1, add(step), t, f"{name}-tiny-then-one"))
    q, k, v = (torch.stack([r[i] for r in rows])[:, None].to(torch.bfloat16) for i in range(3))
    return q, k, v, pairs


def _run(path, spec, safeguards, ts, seed, kinds_for_t=lambda i: KINDS, seq: int = SEQ, device: str = "cpu"):
    """O, LSE, dQ, dK, dV of every variant, dO zero beyond each pair's t."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v, pairs = _variants(ts, gen, kinds_for_t, seq)
    do = torch.randn(q.shape, generator=gen).to(torch.bfloat16)
    for b, p, t, _ in pairs:
        do[p] = do[b]  # the same upstream gradient for a base and its perturbation
        do[b, :, t + 1:] = 0
        do[p, :, t + 1:] = 0
    q, k, v, do = (x.to(device) for x in (q, k, v, do))
    q, k, v = (x.requires_grad_(True) for x in (q, k, v))
    fn = flamia_attention if path == "triton" else reference.attention
    o = fn(q, k, v, spec, True, safeguards)
    lse2 = o.grad_fn.saved_tensors[-2]  # both autograd Functions save (lse2, M offset) last
    o.backward(do)
    return (o.detach(), reference.lse_from_saved(lse2), q.grad, k.grad, v.grad), pairs


def _leaks(outs, pairs, forward: bool = True, backward: bool = True) -> list[str]:
    """Labels of the pairs whose prefix outputs or gradients (or zero-suffix gradients) differ."""
    o, lse, dq, dk, dv = outs
    bad = []
    for b, p, t, label in pairs:
        same = True
        if forward:
            same &= torch.equal(o[p, :, : t + 1], o[b, :, : t + 1])
            same &= torch.equal(lse[p, :, : t + 1], lse[b, :, : t + 1])
        if backward:
            for g in (dq, dk, dv):
                same &= torch.equal(g[p, :, : t + 1], g[b, :, : t + 1])
                same &= not g[p, :, t + 1:].any().item() and not g[b, :, t + 1:].any().item()
        if not same:
            bad.append(f"t={t} {label}")
    return bad


def _assert_each_test_catches_every_leak(outs, pairs) -> None:
    """Test 5: the forward checks alone and the backward checks alone each see a leak through Q, K and V."""
    for check in ({"backward": False}, {"forward": False}):
        bad = _leaks(outs, pairs, **check)
        for name in OPS:
            assert any(f" {name}-" in b for b in bad), f"{check}: a leak through {name} went unnoticed: {bad}"


def _rotating(n: int) -> tuple[str]:
    return (KINDS[n % len(KINDS)],)


@pytest.mark.parametrize("spec", QUANTIZED)
def test_prefix_reference(spec):
    """Tests 2 and 3 on the reference: every t x every kind x each of Q, K, V."""
    outs, pairs = _run("reference", spec, True, _t_values(7), seed=11)
    assert len(pairs) == len(_t_values(7)) * len(KINDS) * len(OPS)
    assert _leaks(outs, pairs) == []


@pytest.mark.parametrize("spec", QUANTIZED)
def test_prefix_triton(spec):
    """Tests 2 and 3 on the Triton kernels: every t with Q, K and V perturbed, the kind rotating
    over t (each kind at 3-4 of the t values) to keep the interpreter's cost in budget."""
    outs, pairs = _run("triton", spec, True, _t_values(7), seed=11, kinds_for_t=_rotating)
    assert _leaks(outs, pairs) == []


@pytest.mark.slow
@pytest.mark.parametrize("spec", QUANTIZED)
def test_prefix_triton_full(spec):
    """Tests 2 and 3 on the Triton kernels, the full product of t, kind and operand."""
    outs, pairs = _run("triton", spec, True, _t_values(7), seed=13)
    assert _leaks(outs, pairs) == []


@pytest.mark.parametrize("path", ["triton", "reference"])
@pytest.mark.parametrize("spec", QUANTIZED)
def test_leaky_variant_is_caught(path, spec):
    """Test 5: safeguards=False (token-block Q/K/V scales, whole-tile V max on the diagonal)
    must fail the same checks, for a perturbation of each of Q, K and V."""
    outs, pairs = _run(path, spec, False, [15, SEQ_BLOCK + 40], seed=12, kinds_for_t=lambda n: ("outlier",))
    _assert_each_test_catches_every_leak(outs, pairs)


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["triton", "reference"])
@pytest.mark.parametrize("spec", QUANTIZED)
def test_prefix_gpu(path, spec):
    """Tests 2, 3 and 5 on the GPU at S = 1024: the full product of t, kind and operand."""
    seq = 8 * SEQ_BLOCK
    ts = _t_values(17, seq)
    outs, pairs = _run(path, spec, True, ts, seed=17, seq=seq, device="cuda")
    assert _leaks(outs, pairs) == []
    outs, pairs = _run(path, spec, False, ts, seed=18, seq=seq, device="cuda")
    _assert_each_test_catches_every_leak(outs, pairs)


def _half_tile_launches(monkeypatch) -> None:
    """Both kernels' half-tile launch options (programs of 64 query rows in the forward and the dQ
    kernel, 64 keys in the dK/dV kernel) instead of the defaults: a program then starts inside a
    tile, and its causal diagonal and token-block copies must still be the tile's."""
    from flamia_kernels import attention_bwd, attention_fwd

    fwd, bwd = attention_fwd.launch_config, attention_bwd.launch_config
    monkeypatch.setattr(attention_fwd, "launch_config", lambda d, emulated: {**fwd(d, emulated), "bm": 64})
    monkeypatch.setattr(attention_bwd, "launch_config",
                        lambda d, ds, emulated=False: {**bwd(d, ds, emulated), "bm": 64, "bn": 64})


def _fused_q(monkeypatch) -> None:
    """The fuse_q launch option: the forward kernel quantizes Q itself (fp8 qk, per-token Q; the
    leaky variant keeps token-block Q from the pre-pass)."""
    from flamia_kernels import attention_fwd

    fwd = attention_fwd.launch_config
    monkeypatch.setattr(attention_fwd, "launch_config", lambda d, emulated: {**fwd(d, emulated), "fuse_q": True})


# launch option -> (how to set it, the seeds of its safe and leaky runs)
LAUNCH_OPTIONS = {"half_tile_launches": (_half_tile_launches, (19, 20)), "fused_q": (_fused_q, (23, 24))}


@pytest.mark.parametrize("spec", ["fp8-bf16dq", "nvfp4-fp8"])
@pytest.mark.parametrize("option", list(LAUNCH_OPTIONS))
def test_prefix_triton_launch_options(option, spec, monkeypatch):
    """Tests 2, 3 and 5 on the Triton kernels under a launch option instead of the defaults."""
    set_option, (safe_seed, leaky_seed) = LAUNCH_OPTIONS[option]
    set_option(monkeypatch)
    outs, pairs = _run("triton", spec, True, _t_values(7), seed=safe_seed, kinds_for_t=_rotating)
    assert _leaks(outs, pairs) == []
    outs, pairs = _run("triton", spec, False, [15, SEQ_BLOCK + 40], seed=leaky_seed,
                       kinds_for_t=lambda n: ("outlier",))
    _assert_each_test_catches_every_leak(outs, pairs)


def _gpu_prefix_checks(spec, safe_seed: int, leaky_seed: int) -> None:
    """test_prefix_gpu's Triton half at S = 1024 on the GPU: no leak with safeguards, every leak
    caught without them."""
    seq = 8 * SEQ_BLOCK
    ts = _t_values(17, seq)
    outs, pairs = _run("triton", spec, True, ts, seed=safe_seed, seq=seq, device="cuda")
    assert _leaks(outs, pairs) == []
    outs, pairs = _run("triton", spec, False, ts, seed=leaky_seed, seq=seq, device="cuda")
    _assert_each_test_catches_every_leak(outs, pairs)


@pytest.mark.gpu
@pytest.mark.parametrize("spec", ["fp8-bf16dq", "nvfp4-fp8"])
@pytest.mark.parametrize("option", list(LAUNCH_OPTIONS))
def test_prefix_gpu_launch_options(option, spec, monkeypatch):
    """test_prefix_gpu's Triton half under a launch option, for the two presets whose fp8 forward
    the options are timed on."""
    LAUNCH_OPTIONS[option][0](monkeypatch)
    _gpu_prefix_checks(spec, 21, 22)


@pytest.mark.gpu
@pytest.mark.parametrize("pipe,extra", [(3, {}), (2, {}), (3, {"head_chunk": 3, "pdl": True}),
                                        (3, {"half_diag": False})], ids=["chain", "pipe2", "chain-chunk3-pdl",
                                                                         "chain-fulldiag"])
@pytest.mark.parametrize("spec", ["fp8-bf16dq", "qk=fp8,pv=fp8,do=fp8,ds=fp8"])
def test_prefix_gpu_gluon_forward(spec, pipe, extra, monkeypatch):
    """test_prefix_gpu's Triton half with the forward on the sm_90 Gluon kernel (launch option
    "gluon", the fp8 fast path's default; its chained and fresh-product variants, and the chained one launched
    in groups of 3 heads as a programmatic dependent of the key-sides pass; GPU only: Gluon has
    no interpreter), at D = 128, the only head dim it takes. A spy
    checks that the Gluon kernel ran."""
    from flamia_kernels import attention_fwd, attention_fwd_gluon

    monkeypatch.setitem(globals(), "DIM", 128)

    fwd, gluon_forward, calls = attention_fwd.launch_config, attention_fwd_gluon.forward, []
    monkeypatch.setattr(attention_fwd, "launch_config",
                        lambda d, emulated: {**fwd(d, emulated), "gluon": True, "pipe": pipe, **extra})
    monkeypatch.setattr(attention_fwd_gluon, "forward", lambda *a, **kw: calls.append(1) or gluon_forward(*a, **kw))
    _gpu_prefix_checks(spec, 25, 26)
    assert calls, "the Gluon forward never ran"


@pytest.mark.gpu
@pytest.mark.parametrize("ws_dkdv,ds_out", [(True, True), (True, "fp8"), (True, False), (False, False)])
def test_prefix_gpu_gluon_backward(monkeypatch, ws_dkdv, ds_out):
    """test_prefix_gpu's Triton half with the dK/dV and dQ kernels on the sm_90 Gluon kernels (launch
    options "gluon" and "gluon_dq" of the backward; the dK/dV kernel warp-specialized, the default, or not), or with
    ds_out (the default) dQ from the dS the ws dK/dV kernel stored (`dq_from_ds`; "fp8": with fp8_dq, the buffer in
    E4M3 under the queries' bound scales, which depend on keys up to each query only), and the forward on the Gluon
    forward, at D = 128. Spies check they ran."""
    from flamia_kernels import attention_bwd, attention_bwd_gluon, attention_dkdv_ws, attention_fwd

    fwd, bwd = attention_fwd.launch_config, attention_bwd.launch_config
    dkdv_module = attention_dkdv_ws if ws_dkdv else attention_bwd_gluon
    dq_module, dq_name = (attention_bwd, "dq_from_ds") if ds_out else (attention_bwd_gluon, "dq")
    dkdv, dq = dkdv_module.dkdv, getattr(dq_module, dq_name)
    calls, dq_calls = [], []
    monkeypatch.setitem(globals(), "DIM", 128)
    monkeypatch.setattr(attention_fwd, "launch_config", lambda d, emulated: {**fwd(d, emulated), "gluon": True})
    monkeypatch.setattr(attention_bwd, "launch_config", lambda d, ds, emulated=False: {
        **bwd(d, ds, emulated), "gluon": True, "ws_dkdv": ws_dkdv, "gluon_dq": 32,
        "ds_out": attention_bwd.DS_OUT_BUDGET if ds_out else 0, "fp8_dq": ds_out == "fp8", "ds_fp8": ds_out == "fp8"})
    monkeypatch.setattr(dkdv_module, "dkdv", lambda *a, **kw: calls.append(1) or dkdv(*a, **kw))
    monkeypatch.setattr(dq_module, dq_name, lambda *a, **kw: dq_calls.append(1) or dq(*a, **kw))
    _gpu_prefix_checks("fp8-bf16dq", 27, 28)
    assert calls, "the Gluon dK/dV kernel never ran"
    assert dq_calls, f"{dq_name} never ran"


def test_every_quantized_preset_is_tested():
    """Tests 2, 3 and 5 run for every preset (bf16 below): a preset added without its prefix tests fails here."""
    assert sorted(QUANTIZED) == sorted(set(PRESETS) - {"bf16"})


def test_prefix_forward_bf16():
    """The bf16 preset (SDPA) passes test 2 as well."""
    gen = torch.Generator().manual_seed(3)
    q, k, v, pairs = _variants([0, 63, SEQ_BLOCK], gen)
    o = flamia_attention(q, k, v, "bf16")
    for b, p, t, label in pairs:
        assert torch.equal(o[p, :, : t + 1], o[b, :, : t + 1]), f"t={t} {label}"


@pytest.mark.parametrize("fmt", ["fp8", "mxfp8", "nvfp4"])
def test_quantizer_prefix(fmt):
    """Test 1: the operand quantizers (per token) keep x[:t+1]'s bytes when x[t+1:] changes;
    the leaky token-block variant does not."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, SEQ, DIM, generator=gen).to(torch.bfloat16)
    for t in _t_values(5):
        y = x.clone()
        y[..., t + 1:, :] = (torch.randn(y[..., t + 1:, :].shape, generator=gen) * 1e3).to(torch.bfloat16)
        a, b = quantize_operand(x, fmt, F), quantize_operand(y, fmt, F)
        assert torch.equal(a.vals[..., : t + 1, :].float(), b.vals[..., : t + 1, :].float()), t
        assert torch.equal(a.scale[..., : t + 1], b.scale[..., : t + 1]), t
    t = 40
    y = x.clone()
    y[..., t + 1:, :] *= 1e3
    a, b = quantize_operand(x, fmt, F, SEQ_BLOCK), quantize_operand(y, fmt, F, SEQ_BLOCK)
    assert not torch.equal(a.dequant()[..., : t + 1, :], b.dequant()[..., : t + 1, :])
