"""Fused FP8 operand quantizer (flamia_kernels.linear_prepass) vs the PyTorch path of `quantize_operand`.

The PyTorch path (pad, group, `formats.quantize_fp8_per_token`, ungroup) is the reference that
tests/test_linear.py holds to `formats` bit for bit; here the Triton kernel must give the same
bytes (uint8 views) and scales (int32 views) on test_quantize's input families (outliers,
exact E4M3 ties, fp8 / fp32 subnormals, zero rows and blocks), with K and M padding, on
row-major operands and on the transposed views dgrad and wgrad hand over, and the transposed
128×128 operand written directly. On CPU the kernel runs under TRITON_INTERPRET=1 (conftest).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from flamia_kernels import linear_gemm as G
from flamia_kernels import linear_prepass as LP
from flamia_kernels import linear_quant as LQ
from flamia_kernels.formats import FP8_TINY
from flamia_kernels.linear_quant import ROWWISE, FP8_1x128, FP8_128x128, MX_1x32, QuantStats, quantize_operand
from test_quantize import FAMILIES, make_input

U8 = torch.uint8
# kind -> (k_multiple as linear_gemm passes it, operand shape): K and M that need padding
KINDS = {"rowwise": (ROWWISE, 1, (48, 200)), "1x128": (FP8_1x128, 128, (48, 200)),
         "128x128": (FP8_128x128, 128, (136, 200))}


@pytest.fixture
def fused_calls(monkeypatch):
    """Count the fused kernel's host calls (so a test knows which path ran)."""
    calls = []
    inner = LP.quantize_fp8_operand

    def counted(*args, **kwargs):
        calls.append(args[1:3])
        return inner(*args, **kwargs)

    monkeypatch.setattr(LP, "quantize_fp8_operand", counted)
    return calls


def _torch_path(monkeypatch, t, kind, kmult, **kw):
    with monkeypatch.context() as m:
        m.setattr(LQ, "can_run_triton", lambda t: False)
        return quantize_operand(t, kind, kmult, **kw)


def assert_same_operand(ref: LQ.QOperand, got: LQ.QOperand) -> None:
    for name in ("data", "scale"):
        a, b = getattr(ref, name), getattr(got, name)
        assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, b.dtype, a.shape, b.shape)
        a, b = (v.contiguous().view(U8 if v.element_size() == 1 else torch.int32) for v in (a, b))
        if not torch.equal(a, b):
            bad = (a != b).nonzero()
            raise AssertionError(f"{name}: {len(bad)} mismatches, first at {bad[0].tolist()}")
    assert got.data.is_contiguous()  # row-major: torch._scaled_mm's .contiguous() copies nothing


def _layouts(x: torch.Tensor):
    """The same values row-major and as a transposed view (how dgrad / wgrad hand operands over)."""
    return {"row-major": x, "transposed view": x.t().contiguous().t()}


@pytest.mark.parametrize("kind_name", list(KINDS))
@pytest.mark.parametrize("family", FAMILIES)
def test_fused_matches_pytorch_path_bit_for_bit(family, kind_name, monkeypatch, fused_calls):
    kind, kmult, shape = KINDS[kind_name]
    i = FAMILIES.index(family) + list(KINDS).index(kind_name)
    x = make_input(family, shape, "fp8", seed=i)
    if i % 2:
        x = x.bfloat16()  # the linears' usual input; bf16 -> fp32 is exact on both paths
    for layout, t in _layouts(x).items():
        ref = _torch_path(monkeypatch, t, kind, kmult)
        before = len(fused_calls)
        assert_same_operand(ref, quantize_operand(t, kind, kmult))
        if kind.is_2d:  # dgrad's B: the transposed operand, written directly
            assert_same_operand(ref.t(), quantize_operand(t, kind, kmult, transposed=True))
        assert len(fused_calls) > before, f"{layout}: the fused kernel did not run"


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # interpreter: Inf/Inf
@pytest.mark.parametrize("family", ["outliers", "tiny", "non-finite"])
def test_rowwise_in_chunks_matches(family, monkeypatch):
    """Rows too long for one tile: every tile's amax folded into the row's at once (atomic max of
    |bits|), then the bytes; M padded (26 -> 32 rows of scales: the padding rows' amax stays 0)."""
    x = make_input("outliers" if family == "non-finite" else family, (26, 200), "fp8", seed=5)
    if family == "non-finite":
        x[1, 7], x[4, 199], x[9, 0] = float("nan"), float("inf"), -float("inf")
    for t in _layouts(x).values():
        ref = _torch_path(monkeypatch, t, ROWWISE, 1)
        ref = LQ.QOperand(ROWWISE, data=F.pad(ref.data.view(U8), (0, 0, 0, 6)).view(ref.data.dtype),
                          scale=torch.cat([ref.scale, torch.full((6, 1), ref.scale.new_tensor(FP8_TINY) / 448)]))
        data, scale = LP.quantize_fp8_operand(t, 1, 0, 32, 200, max_block_k=64)
        assert_same_operand(ref, LQ.QOperand(ROWWISE, data=data, scale=scale))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # interpreter: Inf/Inf
def test_non_finite_rows_match(monkeypatch):
    x = torch.randn(16, 256)
    x[1, 7], x[4, 200], x[9, 0] = float("nan"), float("inf"), -float("inf")
    for kind, kmult in ((ROWWISE, 1), (FP8_1x128, 128)):
        ref, got = (q.dense() for q in (_torch_path(monkeypatch, x, kind, kmult), quantize_operand(x, kind, kmult)))
        assert torch.equal(ref.isnan(), got.isnan()) and ref.isnan().sum() >= 128
        assert torch.equal(ref[~ref.isnan()], got[~got.isnan()])


def test_which_path_runs(monkeypatch, fused_calls):
    """Fused: FP8 kinds without stats where Triton runs. Else the PyTorch path, same results."""
    x = torch.randn(32, 256)
    stats = QuantStats()
    got = quantize_operand(x, FP8_1x128, 128, stats=stats, key="fprop.x")  # telemetry: the PyTorch path
    assert not fused_calls and stats.keys() == ["fprop.x"]
    assert_same_operand(got, quantize_operand(x, FP8_1x128, 128))
    assert fused_calls == [(1, 128)]
    quantize_operand(x.double(), ROWWISE, 1)  # fp64: not a kernel dtype
    quantize_operand(x, MX_1x32, 32)
    _torch_path(monkeypatch, x, ROWWISE, 1)
    assert fused_calls == [(1, 128)]
    for path in (quantize_operand, lambda *a, **k: _torch_path(monkeypatch, *a, **k)):
        with pytest.raises(ValueError, match="cannot be transposed"):
            path(x, ROWWISE, 1, transposed=True)


@pytest.mark.parametrize("fmt", ["fp8", "fp8-block"])
def test_gemms_equal_with_and_without_stats(fmt):
    """A stats-recording step (PyTorch quantizers) computes what the fused path computes."""
    torch.manual_seed(1)
    x, w, dy = torch.randn(200, 136), torch.randn(72, 136) / 12, torch.randn(200, 72)
    runs = [(G.fprop(x, w, fmt, stats), G.dgrad(dy, w, fmt, stats), G.wgrad(dy, x, fmt, torch.float32, stats))
            for stats in (None, QuantStats())]
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("kind_name", list(KINDS))
def test_gpu_kernel_matches_cpu_bytes(kind_name, monkeypatch):
    """Compiled kernel on CUDA vs the PyTorch path on the CPU (the ground truth), at a linear's shape."""
    kind, kmult, _ = KINDS[kind_name]
    for i, family in enumerate(FAMILIES):
        x = make_input(family, (2048, 768), "fp8", seed=i)
        for dtype in (torch.float32, torch.bfloat16):
            for t in _layouts(x.to(dtype)).values():
                ref = _torch_path(monkeypatch, t, kind, kmult)
                got = quantize_operand(t.cuda(), kind, kmult)
                assert_same_operand(ref, LQ.QOperand(kind, data=got.data.cpu(), scale=got.scale.cpu()))
                if kind.is_2d:
                    got = quantize_operand(t.cuda(), kind, kmult, transposed=True)
                    assert_same_operand(ref.t(), LQ.QOperand(kind, data=got.data.cpu(), scale=got.scale.cpu()))
