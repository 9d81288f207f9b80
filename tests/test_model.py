"""The GPT model: shapes, causality (FLAMIA test 4), GQA / QK-norm / tying, init, RoPE, registry, FLOPs."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import flamia_kernels
import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from flamia_train.errors import ConfigError
from flamia_train.model import GPT, MODEL_SHAPES, ModelConfig, validate_model_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "model"
SMALL = ModelConfig(vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4)


def build(seed: int = 0, specs: list | None = None, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(dataclasses.replace(SMALL, **overrides), specs)


def tokens(batch: int, seq: int, vocab: int = SMALL.vocab_size) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq))


def test_forward_shape_and_dtype():
    model = build()
    x = tokens(3, 32)
    logits = model(x)
    assert logits.shape == (3, 32, SMALL.vocab_size) and logits.dtype == torch.float32
    assert torch.isfinite(logits).all()
    # In bf16 (what FSDP2's param_dtype=bf16 gives each block) the logits come out in bf16.
    assert model.to(torch.bfloat16)(x).dtype == torch.bfloat16


def test_every_parameter_gets_a_gradient():
    model = build(qk_norm=True, n_kv_heads=2, tie_embeddings=False)
    x = tokens(2, 32)
    F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def _assert_prefix_invariant(model: GPT, seq: int, positions: list[int]) -> None:
    x = tokens(2, seq, model.cfg.vocab_size)
    with torch.no_grad():
        base = model(x)
        for t in positions:
            y = x.clone()
            y[:, t + 1:] = tokens(2, seq - t - 1, model.cfg.vocab_size)
            assert not torch.equal(x, y)
            out = model(y)
            assert torch.equal(out[:, : t + 1], base[:, : t + 1]), f"logits at <= {t} changed"
            assert not torch.equal(out[:, t + 1:], base[:, t + 1:])


def test_causal_prefix_bit_identical_bf16():
    """FLAMIA.md test 4: changing tokens after t leaves logits[:t+1] bit-identical."""
    _assert_prefix_invariant(build(n_kv_heads=2), seq=64, positions=[0, 1, 15, 16, 31, 32, 47, 62])


def _fp8_spec_or_skip():
    if not hasattr(flamia_kernels, "AttentionSpec"):
        pytest.skip("flamia_kernels.AttentionSpec is not exported yet")
    try:
        spec = flamia_kernels.AttentionSpec.parse("fp8")
    except Exception as exc:  # the kernel package decides what it supports
        pytest.skip(f"AttentionSpec.parse('fp8') raises: {exc}")
    return spec


def test_causal_prefix_bit_identical_fp8():
    """Test 4 with FP8 attention in every layer (CPU: interpreter or reference path)."""
    spec = _fp8_spec_or_skip()
    block = getattr(flamia_kernels, "SEQ_BLOCK", 64)
    model = build(d_model=128, n_heads=2, n_kv_heads=1)
    model.set_attention_specs([spec] * model.cfg.n_layers)
    seq = 2 * block
    _assert_prefix_invariant(model, seq=seq, positions=[0, block - 1, block, seq - 2])


def test_every_layer_calls_flamia_attention_with_its_spec(monkeypatch):
    calls = []
    real = flamia_kernels.flamia_attention

    def spy(q, k, v, spec="bf16", causal=True, **kw):
        calls.append((spec, causal, q.dtype, k.dtype, v.dtype, q.shape, k.shape))
        return real(q, k, v, spec="bf16", causal=causal, **kw)

    monkeypatch.setattr(flamia_kernels, "flamia_attention", spy)
    model = build(n_layers=3, n_kv_heads=2)
    model.set_attention_specs(["bf16", "layer1-spec", "layer2-spec"])
    assert model.attention_specs == ["bf16", "layer1-spec", "layer2-spec"]
    model(tokens(2, 16))
    assert [c[0] for c in calls] == ["bf16", "layer1-spec", "layer2-spec"]
    for _, causal, *dtypes, q_shape, k_shape in calls:
        assert causal and dtypes == [torch.bfloat16] * 3
        assert q_shape == (2, 4, 16, 16) and k_shape == (2, 2, 16, 16)  # (B, H, S, Dh), GQA kept


def test_attention_specs_must_match_layers():
    with pytest.raises(ConfigError, match="one per layer"):
        build(specs=["bf16"])
    with pytest.raises(ConfigError, match="one per layer"):
        build().set_attention_specs(["bf16"] * 3)


def test_gqa_equals_mha_with_shared_kv_heads():
    """A 4:2 GQA model computes what an MHA model computes with each KV head duplicated."""
    gqa = build(n_kv_heads=2)
    mha = build(n_kv_heads=4)
    shared = {k: v for k, v in gqa.state_dict().items() if not k.endswith(("wk.weight", "wv.weight"))}
    mha.load_state_dict(shared, strict=False)  # wk / wv differ in shape: duplicated below
    dh, group = SMALL.head_dim, SMALL.n_heads // 2
    with torch.no_grad():
        for g_block, m_block in zip(gqa.layers, mha.layers, strict=True):
            for name in ("wk", "wv"):
                w = getattr(g_block.attention, name).weight.view(2, dh, SMALL.d_model)  # (Hkv, Dh, D)
                getattr(m_block.attention, name).weight.copy_(w.repeat_interleave(group, 0).flatten(0, 1))
    assert gqa.layers[0].attention.wk.weight.shape == (2 * dh, SMALL.d_model)
    x = tokens(2, 32)
    torch.testing.assert_close(gqa(x), mha(x), rtol=0, atol=0)


def test_qk_norm_makes_attention_scale_invariant():
    model = build(qk_norm=True)
    assert model.layers[0].attention.q_norm.weight.shape == (SMALL.head_dim,)
    x = tokens(2, 32)
    before = model(x)
    with torch.no_grad():
        for block in model.layers:
            block.attention.wq.weight.mul_(8.0)
            block.attention.wk.weight.mul_(0.25)
    torch.testing.assert_close(model(x), before, rtol=2e-2, atol=2e-2)
    plain = build()
    with torch.no_grad():
        plain.layers[0].attention.wq.weight.mul_(8.0)
    assert not torch.allclose(plain(x), build()(x), rtol=2e-2, atol=2e-2)


def test_tied_and_untied_embeddings():
    tied, untied = build(), build(tie_embeddings=False)
    assert tied.output.weight is tied.tok_embeddings.weight
    assert untied.output.weight is not untied.tok_embeddings.weight
    table = SMALL.vocab_size * SMALL.d_model
    assert untied.num_params() - tied.num_params() == table
    assert tied.num_params(exclude_embeddings=True) == tied.num_params() - table
    assert "output.weight" in untied.state_dict()
    torch.manual_seed(1)
    tied.init_weights()
    assert torch.equal(tied.output.weight, tied.tok_embeddings.weight)


def test_init_scheme_statistics():
    cfg = dataclasses.replace(SMALL, d_model=256, n_layers=6, vocab_size=2048, tie_embeddings=False)
    torch.manual_seed(0)
    model = GPT(cfg)
    std, out_std = cfg.init_std, cfg.init_std / math.sqrt(2 * cfg.n_layers)

    def check(w, expected):
        assert abs(w.mean().item()) < 0.05 * expected
        assert abs(w.std().item() / expected - 1) < 0.03, (w.std().item(), expected)

    check(model.tok_embeddings.weight, std)
    check(model.output.weight, std)
    for block in model.layers:
        attn, mlp = block.attention, block.mlp
        for w in (attn.wq, attn.wk, attn.wv, mlp.w_gate, mlp.w_up):
            check(w.weight, std)
        check(block.attention.wo.weight, out_std)
        check(block.mlp.w_down.weight, out_std)
        assert torch.equal(block.attention_norm.weight, torch.ones(cfg.d_model))
        assert torch.equal(block.mlp_norm.weight, torch.ones(cfg.d_model))
    assert torch.equal(model.norm.weight, torch.ones(cfg.d_model))


@pytest.mark.parametrize("tie", [True, False])
def test_meta_init_equals_eager_init(tie):
    cfg = dataclasses.replace(SMALL, qk_norm=True, n_kv_heads=2, tie_embeddings=tie)
    eager = GPT(cfg)
    torch.manual_seed(7)
    eager.init_weights()
    with torch.device("meta"):
        lazy = GPT(cfg)
    lazy.to_empty(device="cpu")
    assert (lazy.output.weight is lazy.tok_embeddings.weight) == tie
    torch.manual_seed(7)
    lazy.init_weights()
    ref = eager.state_dict()
    assert lazy.state_dict().keys() == ref.keys()
    for name, value in lazy.state_dict().items():
        assert torch.equal(value, ref[name]), name
    x = tokens(2, 16)
    assert torch.equal(lazy(x), eager(x))
    torch.manual_seed(8)
    lazy.init_weights()
    assert not torch.equal(lazy.layers[0].attention.wq.weight, eager.layers[0].attention.wq.weight)


def test_set_rope_theta_changes_outputs_and_can_be_undone():
    model = build()
    x = tokens(2, 32)
    base = model(x)
    model.set_rope_theta(500000.0)
    moved = model(x)
    assert not torch.allclose(moved[:, 1:], base[:, 1:])
    assert torch.equal(moved[:, 0], base[:, 0])  # position 0 is not rotated by any theta
    assert SMALL.rope_theta == 10000.0  # the caller's config is untouched
    model.set_rope_theta(SMALL.rope_theta)
    assert torch.equal(model(x), base)
    with pytest.raises(ConfigError, match="rope_theta"):
        model.set_rope_theta(0)


@pytest.mark.parametrize("name", sorted(MODEL_SHAPES))
def test_yaml_equals_registry(name):
    path = CONFIGS / f"{name}.yaml"
    raw = OmegaConf.load(path)
    expected = MODEL_SHAPES[name]
    assert set(raw.keys()) == {f.name for f in dataclasses.fields(ModelConfig)}, "list every field"
    loaded = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), raw))
    assert loaded == expected
    assert expected.name == name
    validate_model_config(expected)


def test_every_model_yaml_is_registered():
    assert {p.stem for p in CONFIGS.glob("*.yaml")} == set(MODEL_SHAPES)


def test_registry_shapes():
    assert MODEL_SHAPES["tiny"] == ModelConfig()
    assert MODEL_SHAPES["gpt-1b"].head_dim == 128
    with torch.device("meta"):
        sizes = {name: GPT(cfg).num_params() for name, cfg in MODEL_SHAPES.items()}
    assert sizes["tiny"] < 10e6
    assert 0.95e9 < sizes["gpt-1b"] < 1.1e9
    assert sizes["llama3-8b"] == 8_030_261_248  # Meta's published Llama 3 8B count


def test_flops_per_token_tiny():
    model = GPT(MODEL_SHAPES["tiny"])  # d 256, 4 layers, 4 heads of 64, ffn 704, vocab 8192, tied
    per_layer = 4 * 256 * 256 + 3 * 256 * 704 + 2 * 256  # attention + SwiGLU + two norms
    n = 4 * per_layer + 256 + 8192 * 256  # + final norm + LM head matmul (tied, counted once here)
    attention = 6 * 4 * 4 * 64 * 1024  # 6·L·H·Dh·S
    assert model.flops_per_token(1024) == 6 * n + attention == 6 * 5_310_720 + 6_291_456
    # The attention share matches the benchmark's causal count: 4·B·H·S²·D·0.5, ×3 for training.
    B, S = 2, 1024
    bench = 3 * 4 * B * 4 * S * S * 64 * 0.5 * 4 / (B * S)
    assert model.flops_per_token(S) - model.flops_per_token(0) == bench


@pytest.mark.parametrize(
    "field,value,key",
    [("n_heads", 5, "model.n_heads"), ("n_kv_heads", 3, "model.n_kv_heads"), ("d_model", 0, "model.d_model"),
     ("ffn_hidden", -1, "model.ffn_hidden"), ("init_std", 0.0, "model.init_std")],
)
def test_bad_shapes_raise_config_error(field, value, key):
    with pytest.raises(ConfigError) as err:
        GPT(dataclasses.replace(SMALL, **{field: value}))
    assert err.value.key == key
