"""Quantized linears: every format × every GEMM role against a reference built from `formats`.

The reference (tests/linear_reference.py) quantizes with the ground-truth functions of
`flamia_kernels.formats` directly and multiplies in fp32: the CPU path must match it bit
for bit. Also: padding, error vs bf16, Hadamard, stochastic rounding, telemetry,
FlamiaLinear, FSDP2 and (marked gpu) the CUDA paths.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from flamia_kernels import linear_gemm as G
from flamia_kernels.hadamard import hadamard_matrix, random_hadamard_transform, random_signs, rht_matrix
from flamia_kernels.linear import (
    LINEAR_FORMATS,
    FlamiaLinear,
    LinearSpec,
    QuantStats,
    quantized_linear,
    set_quant_step,
)
from flamia_kernels.linear_quant import NV_1x16, quantize_operand
from linear_reference import ref_dgrad, ref_fprop, ref_wgrad

QUANT = [f for f in LINEAR_FORMATS if f != "bf16"]
ROLES = ("fprop", "dgrad", "wgrad")
T, IN, OUT = 256, 256, 384  # multiples of every block: no padding, bit-exact comparisons


def _inputs(dtype=torch.float32, t=T, n_in=IN, n_out=OUT):
    x = torch.randn(2, t // 2, n_in, dtype=dtype)
    x[0, 3, 5] = 40.0  # an outlier, so per-row / per-block scales differ visibly
    w = (torch.randn(n_out, n_in) / n_in**0.5).to(dtype)
    dy = torch.randn(2, t // 2, n_out, dtype=dtype)
    return x, w, dy


def _run(x, w, dy, spec, seed=7, stats=None):
    x, w = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    y = quantized_linear(x, w, spec, stats=stats, seed=seed)
    y.backward(dy)
    return y.detach(), x.grad, w.grad


# ---------------------------------------------------------------- LinearSpec


def test_spec_parse_forms():
    spec = LinearSpec("fp8", "fp8", "bf16")
    assert LinearSpec.parse(spec) is spec
    assert LinearSpec.parse("FP8") == LinearSpec("fp8", "fp8", "fp8") and LinearSpec.parse("fp8").name == "fp8"
    assert LinearSpec.parse("wgrad=bf16, fprop=fp8,dgrad=fp8") == spec
    assert LinearSpec.parse({"fprop": "fp8", "dgrad": "fp8"}) == spec
    assert spec.name == "fprop=fp8,dgrad=fp8,wgrad=bf16" and LinearSpec.parse(spec.name) == spec
    assert LinearSpec().is_bf16 and not spec.is_bf16 and LinearSpec.parse("wgrad=nvfp4").emulated
    for fmt in LINEAR_FORMATS:
        assert LinearSpec.parse(LinearSpec.parse(fmt).name) == LinearSpec(fmt, fmt, fmt)


@pytest.mark.parametrize("bad, match", [
    ("fp9", r"'fp9'; allowed: one of bf16, fp8, fp8-block, mxfp8, nvfp4"),
    ("fprop=fp9", r"bad format 'fp9' for fprop; allowed: bf16, fp8"),
    ("fgrad=fp8", r"unknown GEMM 'fgrad'; allowed: fprop, dgrad, wgrad"),
    ("fprop=fp8,fprop=bf16", r"'fprop' given twice"),
    ("fprop=fp8,wgrad", r"bad part 'wgrad'"),
    ({"dgrad": "int8"}, r"bad format 'int8' for dgrad"),
    ({"qk": "fp8"}, r"unknown GEMM 'qk'"),
    (3, r"must be a string, a mapping or a LinearSpec"),
])
def test_spec_parse_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        LinearSpec.parse(bad)
    with pytest.raises(ValueError, match="bad format 'x' for wgrad"):
        LinearSpec(wgrad="x")


# ---------------------------------------------------------------- numerics per GEMM role


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("fmt", QUANT)
def test_role_matches_reference(fmt, role):
    """One GEMM quantized at a time: it equals the formats-built reference bit for bit, the others are exact."""
    torch.manual_seed(hash((fmt, role)) % 1000)
    x, w, dy = _inputs()
    spec = LinearSpec(**{role: fmt})
    y, dx, dw = _run(x, w, dy, spec, seed=11)
    y0, dx0, dw0 = _run(x, w, dy, "bf16")
    x2, dy2 = x.reshape(T, IN), dy.reshape(T, OUT)
    want = {"fprop": (y, ref_fprop(x2, w, fmt).reshape(y.shape), y0),
            "dgrad": (dx, ref_dgrad(dy2, w, fmt, 11).reshape(dx.shape), dx0),
            "wgrad": (dw, ref_wgrad(dy2, x2, fmt, 11), dw0)}
    for name, (got, ref, exact) in want.items():
        if name == role:
            assert torch.equal(got, ref), f"{fmt} {role}: max diff {(got - ref).abs().max()}"
            assert not torch.equal(got, exact)  # it really was quantized
        else:
            torch.testing.assert_close(got, exact, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt", QUANT)
def test_zero_padding_is_invisible(fmt):
    """Dims that do not fill a block give what explicitly zero-padded inputs give."""
    torch.manual_seed(3)
    t, n_in, n_out = 200, 136, 72
    x, w, dy = (v.reshape(-1, v.shape[-1]) for v in _inputs(t=t, n_in=n_in, n_out=n_out))
    # nvfp4's stochastic draws follow the padded shape, so its gradients are not compared here.
    spec = LinearSpec(fmt, "bf16", "bf16") if fmt == "nvfp4" else LinearSpec(fmt, fmt, fmt)
    y, dx, dw = _run(x, w, dy, spec)
    xp, wp, dyp = F.pad(x, (0, 256 - n_in, 0, 256 - t)), F.pad(w, (0, 256 - n_in, 0, 128 - n_out)), \
        F.pad(dy, (0, 128 - n_out, 0, 256 - t))
    yp, dxp, dwp = _run(xp, wp, dyp, spec)
    # Same quantized values; only fp32 summation order may differ with the padded length.
    for got, want in ((y, yp[:t, :n_out]), (dx, dxp[:t, :n_in]), (dw, dwp[:n_out, :n_in])):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("fmt, lo, hi", [("fp8", 0.005, 0.06), ("fp8-block", 0.005, 0.06),
                                         ("mxfp8", 0.005, 0.06), ("nvfp4", 0.05, 0.2)])
def test_error_vs_bf16_is_format_typical(fmt, lo, hi):
    torch.manual_seed(5)
    x, w, dy = _inputs(torch.bfloat16)
    exact = _run(x.double(), w.double(), dy.double(), "bf16")
    got = _run(x, w, dy, fmt)
    assert got[0].dtype == torch.bfloat16 and got[2].dtype == torch.bfloat16
    for name, g, e in zip(("y", "dx", "dw"), got, exact, strict=True):
        rel = ((g.double() - e).norm() / e.norm()).item()
        assert lo < rel < hi, f"{fmt} {name}: relative L2 error {rel:.4f} outside ({lo}, {hi})"


# ---------------------------------------------------------------- Hadamard and stochastic rounding


def test_hadamard_is_orthogonal_and_seeded():
    h = hadamard_matrix(16)
    assert torch.equal(h @ h.t(), 16 * torch.eye(16)) and set(h.unique().tolist()) == {-1.0, 1.0}
    m = rht_matrix(123)
    torch.testing.assert_close(m @ m.t(), torch.eye(16), rtol=0, atol=1e-6)
    assert torch.equal(random_signs(123), random_signs(123))
    assert not torch.equal(random_signs(123), random_signs(124))
    with pytest.raises(ValueError, match="multiple of the block 16"):
        random_hadamard_transform(torch.randn(3, 20), 0)


@pytest.mark.parametrize("tokens", [256, 200])
def test_rht_cancels_without_quantization(tokens):
    """RHT on, nothing quantized: dW equals dYᵀ·X to float tolerance, though the operands changed."""
    torch.manual_seed(9)
    dy, x = torch.randn(tokens, 48), torch.randn(tokens, 80)
    dy[7, 3] = 1e3  # an outlier the rotation spreads over its block
    dw = G.wgrad(dy, x, "bf16", torch.float32, seed=42, rht=True)
    torch.testing.assert_close(dw, dy.t() @ x, rtol=1e-5, atol=2e-3)
    rotated = G._rotate(dy.t(), 42)
    assert rotated.abs().max() < 0.5 * dy.abs().max()


def test_stochastic_rounding_is_unbiased():
    torch.manual_seed(2)
    row = torch.randn(1, 64)
    rows = row.expand(20000, 64)  # same amax: every row shares the global and block scales
    gen = torch.Generator().manual_seed(1)
    sr = quantize_operand(rows, NV_1x16, 16, stochastic=True, generator=gen).dense()
    rne = quantize_operand(row, NV_1x16, 16).dense()
    # Unbiased below the saturation point only: skip elements near their block's amax (E4M3
    # rounding of the block scale may push those past 6, where the clamp biases them).
    block_amax = row.reshape(4, 16).abs().amax(1, keepdim=True).expand(4, 16).reshape(1, 64)
    inside = (row.abs() < 0.6 * block_amax)[0]
    step = (rne - row).abs().max()
    mean_err = (sr.mean(0) - row[0]).abs()[inside]
    assert mean_err.max() < 0.02 * step, "stochastic rounding is biased"
    assert (rne[0] - row[0]).abs()[inside].max() > 10 * mean_err.max()  # RNE is: the test can fail
    assert not torch.equal(sr[0], sr[1])  # the draws differ between rows


# ---------------------------------------------------------------- telemetry


def test_stats_on_crafted_input():
    k = 32
    x = torch.full((4, k), 0.5)
    x[:, 0] = torch.arange(1, 5).float()  # amax of each row: saturates (maps to 448)
    x[:, 1] = 1e-6 * torch.arange(1, 5).float()  # / (amax / 448) < 2^-10: rounds to zero
    x[:, 2] = 0.0  # zeros are not underflow
    w = torch.randn(16, k)
    layer = FlamiaLinear(k, 16, bias=False)
    layer.weight.data.copy_(w)
    layer.set_spec("fprop=fp8")
    layer.collect_stats = True
    layer(x.requires_grad_(True)).sum().backward()
    s = layer.stats.summary()
    assert set(s) == {f"fprop.{o}.{m}" for o in ("x", "w") for m in ("amax", "saturation", "underflow")}
    assert s["fprop.x.amax"] == 4.0
    assert s["fprop.x.saturation"] == pytest.approx(1 / k)
    assert s["fprop.x.underflow"] == pytest.approx(1 / (k - 1))
    assert s["fprop.w.amax"] == pytest.approx(w.abs().max().item())
    layer(x).sum().backward()  # accumulates: fractions stay, amax is a max
    assert layer.stats.summary()["fprop.x.underflow"] == pytest.approx(1 / (k - 1))
    layer.stats.reset()
    assert layer.stats.summary() == {}


def test_stats_nvfp4_saturation_and_all_roles():
    torch.manual_seed(4)
    x, w, dy = _inputs(t=128)
    stats = QuantStats()
    _run(x, w, dy, "nvfp4", stats=stats)
    s = stats.summary()
    assert {k.rsplit(".", 1)[0] for k in s} == {"fprop.x", "fprop.w", "dgrad.dy", "dgrad.w", "wgrad.dy",
                                                "wgrad.x"}
    for key in ("fprop.x", "dgrad.dy"):
        # each 16-block's amax lands on 6 (1/16), more when E4M3 rounds the block scale down
        assert 1 / 16 <= s[f"{key}.saturation"] < 0.5 and 0 <= s[f"{key}.underflow"] < 0.2
    stats2 = QuantStats()
    _run(x, w, dy, "fprop=bf16,dgrad=nvfp4,wgrad=bf16", stats=stats2)
    assert {k.rsplit(".", 1)[0] for k in stats2.summary()} == {"dgrad.dy", "dgrad.w"}


# ---------------------------------------------------------------- FlamiaLinear


def test_flamia_linear_bf16_is_nn_linear():
    torch.manual_seed(0)
    ref = torch.nn.Linear(48, 40)
    torch.manual_seed(0)
    layer = FlamiaLinear(48, 40)
    assert layer.spec == LinearSpec() and torch.equal(layer.weight, ref.weight)
    x = torch.randn(3, 5, 48, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    y, y2 = layer(x), ref(x2)
    assert torch.equal(y, y2)
    y.square().sum().backward()
    y2.square().sum().backward()
    assert torch.equal(x.grad, x2.grad) and torch.equal(layer.weight.grad, ref.weight.grad)
    assert torch.equal(layer.bias.grad, ref.bias.grad)
    layer.set_spec("fp8")
    assert "spec=fp8" in repr(layer) and not torch.equal(layer(x), y)


def test_flamia_linear_draws_follow_seed_and_step():
    torch.manual_seed(1)
    layer = FlamiaLinear(64, 32, bias=False)
    layer.set_spec("fprop=bf16,dgrad=nvfp4,wgrad=nvfp4")
    x = torch.randn(64, 64)

    def grads():
        xi = x.clone().requires_grad_(True)
        layer(xi).sin().sum().backward()
        out = (xi.grad, layer.weight.grad.clone())
        layer.weight.grad = None
        return out

    set_quant_step(layer, 5)
    a1, a2 = grads(), grads()  # two micro-batches of step 5: different draws
    assert not torch.equal(a1[0], a2[0]) and not torch.equal(a1[1], a2[1])
    set_quant_step(torch.nn.Sequential(layer), 5)  # a resume at step 5 replays them
    assert all(torch.equal(p, q) for p, q in zip(grads(), a1, strict=True))
    layer.seed = 1  # another layer: other draws
    set_quant_step(layer, 5)
    assert not torch.equal(grads()[0], a1[0])


@pytest.mark.parametrize("fmt", LINEAR_FORMATS)
def test_tiny_mlp_trains(fmt):
    torch.manual_seed(0)
    teacher = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 32))
    model = torch.nn.Sequential(FlamiaLinear(64, 64), torch.nn.GELU(), FlamiaLinear(64, 32))
    for m in model:
        if isinstance(m, FlamiaLinear):
            m.set_spec(fmt)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for step in range(40):
        set_quant_step(model, step)
        x = torch.randn(64, 64)
        with torch.no_grad():
            target = teacher(x)
        loss = F.mse_loss(model(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.5 * first, f"{fmt}: loss {first:.4f} -> {last:.4f}"


# ---------------------------------------------------------------- FSDP2: quantize after all-gather


@pytest.fixture(scope="module")
def process_group():
    from flamia_train.parallel import init_distributed, shutdown

    owned = not dist.is_initialized()
    init_distributed("cpu")
    yield
    if owned:
        shutdown()


@pytest.mark.parametrize("fmt", ["fp8-block", "nvfp4"])
def test_fsdp_world1_matches_unsharded(process_group, fmt, monkeypatch):
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    torch.manual_seed(6)
    ref = torch.nn.Sequential(FlamiaLinear(64, 128), torch.nn.GELU(), FlamiaLinear(128, 48))
    for m in ref:
        if isinstance(m, FlamiaLinear):
            m.set_spec(fmt)
    sharded = copy.deepcopy(ref)
    for m in sharded:
        if isinstance(m, FlamiaLinear):
            fully_shard(m)
    fully_shard(sharded)
    assert all(isinstance(p, DTensor) for p in sharded.parameters())
    seen = []
    real_fprop = G.fprop
    monkeypatch.setattr(G, "fprop", lambda x, w, *a: (seen.append(w), real_fprop(x, w, *a))[1])
    x = torch.randn(4, 32, 64)
    outs = []
    for model in (ref, sharded):
        set_quant_step(model, 3)
        y = model(x)
        y.square().mean().backward()
        grads = [p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad for p in model.parameters()]
        outs.append((y.detach(), grads))
    # The op received the gathered full weight (a plain tensor), never a DTensor shard.
    assert [tuple(w.shape) for w in seen] == [(128, 64), (48, 128)] * 2
    assert not any(isinstance(w, DTensor) for w in seen)
    assert torch.equal(outs[0][0], outs[1][0])
    for g_ref, g in zip(outs[0][1], outs[1][1], strict=True):
        assert torch.equal(g_ref, g)


def test_wrong_native_product_falls_back_to_the_exact_emulation(monkeypatch):
    """A native GEMM that returns wrong numbers (a scale layout cuBLAS reads another way gives no
    error) is caught by the once-per-shape check: the exact emulation runs, with a warning."""
    monkeypatch.setattr(G, "_NATIVE_BROKEN", {})
    monkeypatch.setattr(G, "_NATIVE_CHECKED", set())
    monkeypatch.setattr(G, "_WARNED", set())
    x, w, _ = _inputs(torch.float32, t=256, n_in=256, n_out=128)
    x = x.flatten(0, 1)
    exact = G.fprop(x, w, "fp8-block")  # CPU: the emulation
    monkeypatch.setattr(G, "native_reason", lambda fmt, m, n, k, device: G._NATIVE_BROKEN.get(((9, 0), fmt)))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(G, "_native_mm", lambda a, b, dt: G._emulated_mm(a, b).to(dt))
    assert torch.equal(G.fprop(x, w, "fp8-block"), exact) and len(G._NATIVE_CHECKED) == 1
    G._NATIVE_CHECKED.clear()
    monkeypatch.setattr(G, "_native_mm", lambda a, b, dt: (2 * G._emulated_mm(a, b)).to(dt))
    with pytest.warns(UserWarning, match="differs from the exact emulation"):
        got = G.fprop(x, w, "fp8-block")
    assert torch.equal(got, exact)
    assert "rel L2" in G._NATIVE_BROKEN[((9, 0), "fp8-block")]


# ---------------------------------------------------------------- GPU: _scaled_mm against the emulation


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", QUANT)
def test_gpu_paths_match_cpu_emulation(fmt, monkeypatch):
    """CUDA paths (_scaled_mm for fp8, bf16-product emulation for mxfp8/nvfp4) vs the exact CPU path,
    every GEMM role in the format. nvfp4's stochastic rounding of dY (dgrad, wgrad) draws from a
    generator on the tensor's device, and CPU and CUDA streams differ (one SR draw apart is ~20% of
    dx, measured on the H200): here both devices draw the same numbers, on the CPU."""
    from flamia_kernels import formats as FM

    def same_draws(x, generator=None):
        seed = generator.initial_seed() if generator is not None else 0
        cpu = torch.Generator().manual_seed(seed)
        return torch.rand(x.shape, generator=cpu, dtype=torch.float32).to(x.device)

    monkeypatch.setattr(FM, "nvfp4_noise", same_draws)
    torch.manual_seed(0)
    x, w, dy = _inputs(torch.bfloat16, t=1024, n_in=1024, n_out=512)
    if fmt in ("fp8", "fp8-block"):
        for m, n, k in ((1024, 512, 1024), (1024, 1024, 512), (512, 1024, 1024)):
            assert G.native_reason(fmt, m, n, k, torch.device("cuda")) is None
    spec = LinearSpec(fmt, fmt, fmt)
    cpu = _run(x, w, dy, spec)
    gpu = _run(x.cuda(), w.cuda(), dy.cuda(), spec)
    assert not G._NATIVE_BROKEN, G._NATIVE_BROKEN
    for name, c, g in zip(("y", "dx", "dw"), cpu, gpu, strict=True):
        rel = ((g.cpu().float() - c.float()).norm() / c.float().norm()).item()
        assert rel < 1e-2, f"{fmt} {name}: GPU vs CPU emulation relative error {rel:.2e}"


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp8"])
def test_emulated_formats_quantize_through_the_triton_prepass(fmt, monkeypatch):
    """Every operand of the three GEMMs goes through `quantize`'s one-launch kernels where Triton runs
    (test_role_matches_reference holds the results to `formats` bit for bit on that path)."""
    from flamia_kernels import quantize as Q

    calls = []
    name = "_nvfp4" if fmt == "nvfp4" else "quantize_mxfp8"
    inner = getattr(Q, name)
    monkeypatch.setattr(Q, name, lambda *a, **k: calls.append(a[0].shape) or inner(*a, **k))
    x, w, dy = _inputs()
    _run(x, w, dy, LinearSpec(fprop=fmt, dgrad=fmt, wgrad=fmt), seed=3)
    assert len(calls) == 6, calls  # X, W (fprop); dY, W (dgrad); dYᵀ, Xᵀ (wgrad)
