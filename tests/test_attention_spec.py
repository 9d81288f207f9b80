"""AttentionSpec parsing and flamia_attention's input checks: clear errors before any kernel runs."""
import pytest
import torch
from flamia_kernels import PRESETS, SEQ_BLOCK, SUPPORTED_HEAD_DIMS, AttentionSpec, flamia_attention


def test_presets_parse_and_name_round_trip():
    for name, spec in PRESETS.items():
        assert AttentionSpec.parse(name) == spec
        assert spec.name == name
        assert AttentionSpec.parse(spec.name) == spec
    assert AttentionSpec.parse(" FP8 ") == PRESETS["fp8"]


def test_per_operand_string():
    spec = AttentionSpec.parse("pv=nvfp4, qk=fp8,do=mxfp8,ds=bf16")
    assert (spec.qk, spec.pv, spec.do, spec.ds) == ("fp8", "nvfp4", "mxfp8", "bf16")
    assert spec.name == "qk=fp8,pv=nvfp4,do=mxfp8,ds=bf16"
    assert AttentionSpec.parse(spec.name) == spec
    assert AttentionSpec.parse("qk=fp8") == AttentionSpec(qk="fp8")  # missing operands stay bf16
    assert AttentionSpec.parse("dsk=fp8,qk=fp8,pv=fp8,do=fp8").name == "fp8"  # a preset by another name
    assert AttentionSpec.parse("qk=fp8,pv=fp8,do=fp8,ds=bf16").name == "fp8-bf16dq"  # fp8's dQ product in bf16
    assert PRESETS["fp8"].dsk == "fp8" and PRESETS["fp8-bf16dq"] == AttentionSpec(qk="fp8", pv="fp8", do="fp8")
    assert not PRESETS["fp8"].emulated and PRESETS["fp8"].fp8_dv and not PRESETS["fp8"].is_bf16
    assert AttentionSpec.parse(spec) is spec
    assert spec.emulated and not PRESETS["fp8"].emulated and PRESETS["bf16"].is_bf16


@pytest.mark.parametrize("text,names", [
    ("fp4", ["'fp4'", "nvfp4-fp8", "qk=F"]),
    ("qk=fp16", ["'fp16'", "bf16, fp8, mxfp8, nvfp4"]),
    ("qk=fp8,xy=fp8", ["'xy=fp8'", "qk, pv, do, ds"]),
    ("qk=fp8,qk=bf16", ["'qk'", "twice"]),
    ("qk=fp8,pv=fp8,do=fp8,dsk=nvfp4", ["'nvfp4'", "dsk=nvfp4", "allowed: bf16, fp8"]),
    ("qk=fp8,pv=nvfp4,do=fp8,dsk=fp8", ["dsk=fp8", "pv=nvfp4", "needs qk=fp8, pv=fp8, do=fp8 and ds=bf16",
                                        "'qk=fp8,pv=nvfp4,do=fp8,dsk=fp8'"]),
    ("fp8,ds=fp8", ["'fp8'"]),
    ("qk:fp8,pv=fp8", ["'qk:fp8'"]),
])
def test_parse_errors_name_the_part_and_the_allowed_values(text, names):
    with pytest.raises(ValueError) as err:
        AttentionSpec.parse(text)
    for n in names:
        assert n in str(err.value)


def test_bad_field_and_type():
    with pytest.raises(ValueError, match="pv='int8'"):
        AttentionSpec(pv="int8")
    with pytest.raises(ValueError, match="dsk='mxfp8'.*allowed: bf16, fp8"):
        AttentionSpec(dsk="mxfp8")
    with pytest.raises(ValueError, match="dsk=fp8 .*needs qk=fp8, pv=fp8, do=fp8 and ds=bf16.*ds=fp8"):
        AttentionSpec(qk="fp8", pv="fp8", do="fp8", ds="fp8", dsk="fp8")
    with pytest.raises(ValueError, match="string or AttentionSpec"):
        AttentionSpec.parse(8)


def _qkv(b=1, hq=2, hkv=1, s=SEQ_BLOCK, d=64, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(b, h, s, d, generator=gen).to(dtype) for h in (hq, hkv, hkv))


@pytest.mark.parametrize("kwargs,exc,match", [
    ({"d": 96}, ValueError, "head_dim 96"),
    ({"s": SEQ_BLOCK + 64}, ValueError, f"multiple of SEQ_BLOCK = {SEQ_BLOCK}"),
    ({"hq": 3, "hkv": 2}, ValueError, "must divide query heads"),
    ({"dtype": torch.float32}, TypeError, "torch.float32"),
])
def test_input_errors_for_quantized_specs(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        flamia_attention(*_qkv(**kwargs), spec="fp8")


def test_rank_device_and_shape_errors():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="rank 4"):
        flamia_attention(q[0], k, v, spec="fp8")
    with pytest.raises(TypeError, match="torch.Tensor"):
        flamia_attention(q, [1], v, spec="fp8")
    with pytest.raises(ValueError, match="must equal k shape"):
        flamia_attention(q, k, v[:, :, :64], spec="fp8")
    with pytest.raises(ValueError, match="match q"):
        flamia_attention(q, k[:, :, :64], v[:, :, :64], spec="fp8")
    with pytest.raises(ValueError, match="unknown attention spec"):
        flamia_attention(q, k, v, spec="fp9")


def test_bf16_spec_takes_any_length_and_float32():
    q, k, v = _qkv(s=40, d=16, dtype=torch.float32)
    assert flamia_attention(q, k, v, spec="bf16").shape == q.shape
    assert set(SUPPORTED_HEAD_DIMS) == {64, 128}
