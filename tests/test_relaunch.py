"""`relaunch.Relaunch`: a plan's key must separate every pair of calls Triton would compile differently, and a
plan's direct launch must pass the launcher what Triton's own launch passes it.

The first property is checked against Triton's binder itself, built for sm_90 on the CPU (no GPU needed): for
many argument sets, equal plan keys must mean equal specializations. The second runs `Relaunch` on a stand-in
kernel that records what it is launched with (the GPU tier runs the real kernels through it:
tests/test_attention_gpu.py, every Gluon kernel bit-identical to its Triton kernel).
"""
import itertools

import pytest
import torch
import triton.language as tl
from flamia_kernels import relaunch
from flamia_kernels.relaunch import Relaunch, _arg_key
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature


def _kernel(X, Y, n, scale, flag, BLOCK: tl.constexpr, FLAG: tl.constexpr = True):
    """The parameter kinds of the attention kernels: pointers, ints, a float, a bool, constexprs."""


def _binder(fn):
    jf = JITFunction(fn)
    return jf, create_function_from_signature(jf.signature, jf.params, make_backend(GPUTarget("cuda", 90, 32)))


def test_equal_plan_keys_mean_equal_triton_specializations():
    _, binder = _binder(_kernel)
    raw = torch.empty(256, dtype=torch.uint8)
    pointers = [raw, raw[1:], raw[16:], raw.view(torch.float32), raw[4:].view(torch.float32), raw.view(torch.bfloat16)]
    ints = [0, 1, 2, 16, 17, 32, 2**31 - 1, 2**31, 2**33, -16, True, False]
    seen: dict = {}
    count = 0
    for x, y, n, scale, flag, block in itertools.product(pointers, pointers[:3], ints, [0.5, 1.0], [True, 1, 0],
                                                         [4, 8]):
        args = (x, y, n, scale, flag)
        _, spec, options = binder(*args, BLOCK=block)
        key = (tuple(_arg_key(a) for a in args), (("BLOCK", type(block), block),))
        triton_key = (tuple(spec), str(options))
        assert seen.setdefault(key, triton_key) == triton_key, f"one plan key, two specializations: {args}"
        count += 1
    assert count > 1000 and len(seen) > 100


def test_descriptor_keys_follow_block_shape_layout_and_dtype():
    gluon_hopper = pytest.importorskip("triton.experimental.gluon.nvidia.hopper")
    gl = pytest.importorskip("triton.experimental.gluon.language")
    fp8_box = gl.NVMMASharedLayout.get_default_for([64, 128], gl.float8e4nv)  # one object, as gluon_layouts
    t8 = torch.empty(256, 128, dtype=torch.uint8).view(torch.float8_e4m3fn)
    tb = torch.empty(256, 128, dtype=torch.bfloat16)
    make = gluon_hopper.TensorDescriptor.from_tensor
    a = make(t8, [64, 128], fp8_box)
    same = make(t8[64:], [64, 128], fp8_box)
    other_box = make(t8, [128, 128], gl.NVMMASharedLayout.get_default_for([128, 128], gl.float8e4nv))
    other_dtype = make(tb, [64, 128], gl.NVMMASharedLayout.get_default_for([64, 128], gl.bfloat16))
    assert _arg_key(a) == _arg_key(same)
    assert len({_arg_key(d) for d in (a, other_box, other_dtype)}) == 3


def test_an_unknown_argument_kind_is_refused():
    with pytest.raises(TypeError, match="no plan key"):
        _arg_key(object())


class _Compiled:
    """Stands in for a CompiledKernel: records what its launcher gets."""

    function, packed_metadata = "fn", "meta"

    def __init__(self, log):
        self.log = log

    def run(self, *launch):
        self.log.append(("direct", launch))

    def launch_metadata(self, *a):
        return None


class _Kernel:
    """Stands in for a JITFunction: `kernel[grid](*args, **kw)` records the call and returns a _Compiled."""

    def __init__(self, fn):
        self.params = JITFunction(fn).params
        self.log: list = []

    def __getitem__(self, grid):
        def launch(*args, **kw):
            self.log.append(("triton", grid, args, kw))
            return _Compiled(self.log)
        return launch


class _Driver:
    class active:  # noqa: N801 (triton.runtime.driver.active's shape)
        @staticmethod
        def get_current_device():
            return 0

        @staticmethod
        def get_current_stream(device):
            return 1234


def test_a_plan_launches_directly_with_triton_s_argument_order(monkeypatch):
    monkeypatch.setattr(relaunch, "INTERPRET", False)
    monkeypatch.setattr(relaunch, "driver", _Driver)
    kernel = _Kernel(_kernel)
    launch = Relaunch(kernel)
    x = torch.empty(64, dtype=torch.uint8)
    args = (x, x, 8192, 0.5, True)
    launch((4, 2), args, dict(BLOCK=64), dict(num_warps=4))
    launch((4, 2), args, dict(BLOCK=64), dict(num_warps=4))
    assert [entry[0] for entry in kernel.log] == ["triton", "direct"]
    assert kernel.log[0][1:] == ((4, 2), args, dict(BLOCK=64, num_warps=4))
    # grid, stream, function, metadata, launch metadata and hooks, then every parameter in order, the
    # constexprs included (the launcher skips them), FLAG at its default
    direct = kernel.log[1][1]
    assert direct[:7] == (4, 2, 1, 1234, "fn", "meta", None)
    assert direct[9:] == (*args, 64, True)
    # a new plan (a misaligned pointer, another constexpr, another option) goes through Triton again
    launch((4, 2), (x[1:], *args[1:]), dict(BLOCK=64), dict(num_warps=4))
    launch((4, 2), args, dict(BLOCK=32), dict(num_warps=4))
    launch((4, 2), args, dict(BLOCK=64), dict(num_warps=8))
    launch((4, 2), (x, x, 1, 0.5, True), dict(BLOCK=64), dict(num_warps=4))
    assert [entry[0] for entry in kernel.log[2:]] == ["triton"] * 4
    assert launch.plans() == 5


def test_a_plan_missing_a_constexpr_is_refused(monkeypatch):
    monkeypatch.setattr(relaunch, "INTERPRET", False)
    monkeypatch.setattr(relaunch, "driver", _Driver)
    launch = Relaunch(_Kernel(_kernel))
    x = torch.empty(64, dtype=torch.uint8)
    with pytest.raises(TypeError, match="no value for BLOCK"):
        launch((1,), (x, x, 8, 0.5, True), {}, {})

