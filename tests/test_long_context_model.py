"""Model side of long context: RoPE rescaling (linear / NTK / YaRN) and document masking.

Document masking: each document of a packed row must come out as if it ran alone (the
reference), prefixes must not see suffixes (the causal prefix test), the loader's doc ids
must follow the EOS boundaries, and quantized specs run it in the FLAMIA kernels.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from flamia_kernels import flamia_attention

from flamia_train.data_loader import PackedLoader
from flamia_train.document_mask import cu_seqlens
from flamia_train.errors import ConfigError
from flamia_train.model import GPT, ModelConfig
from flamia_train.rope import RopeScaling, inv_frequencies, magnitude, rope_table

SMALL = ModelConfig(vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2)
EOS = 2


def build(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(dataclasses.replace(SMALL, **overrides))


# ---- RoPE -----------------------------------------------------------------------------------
def test_linear_scaling_is_position_interpolation():
    factor, theta = np.random.choice([2, 4, 8]), float(np.random.uniform(1e3, 1e6))
    plain = rope_table(64, 32, theta, torch.device("cpu"))
    scaled = rope_table(64 * factor, 32, theta, torch.device("cpu"), RopeScaling("linear", float(factor)))
    torch.testing.assert_close(scaled[::factor], plain, rtol=0, atol=1e-5)  # position m·s acts as m


def test_ntk_keeps_the_highest_and_divides_the_lowest_frequency():
    factor, dim = float(np.random.uniform(2, 16)), 64
    plain, ntk = inv_frequencies(dim, 1e4), inv_frequencies(dim, 1e4, RopeScaling("ntk", factor))
    assert ntk[0] == plain[0] == 1.0
    assert ntk[-1].item() == pytest.approx(plain[-1].item() / factor, rel=1e-12)
    assert (ntk <= plain).all() and (ntk[1:] < plain[1:]).all()


def test_yarn_keeps_fast_pairs_interpolates_slow_ones_and_scales_logits():
    factor, dim, original = 8.0, 128, 512
    scaling = RopeScaling("yarn", factor, original)
    plain, yarn = inv_frequencies(dim, 1e4), inv_frequencies(dim, 1e4, scaling)
    turns = original * plain / (2 * math.pi)  # rotations of each pair over the original context
    fast, slow = turns >= scaling.beta_fast, turns <= scaling.beta_slow
    assert fast.any() and slow.any()
    torch.testing.assert_close(yarn[fast], plain[fast], rtol=1e-12, atol=0)
    torch.testing.assert_close(yarn[slow], plain[slow] / factor, rtol=1e-12, atol=0)
    assert ((yarn >= plain / factor - 1e-15) & (yarn <= plain + 1e-15)).all()
    table = rope_table(16, dim, 1e4, torch.device("cpu"), scaling)
    torch.testing.assert_close(table.abs(), torch.full((16, dim // 2), 0.1 * math.log(factor) + 1.0))
    assert magnitude(RopeScaling("linear", factor)) == 1.0


def test_model_rope_scaling_changes_outputs_can_be_undone_and_stays_causal():
    model = build()
    x = torch.randint(0, SMALL.vocab_size, (2, 48))
    with torch.no_grad():
        base = model(x)
        model.set_rope_scaling("yarn", 4.0, original_seq_len=16)
        scaled = model(x)
        y = x.clone()
        y[:, 30:] = torch.randint(0, SMALL.vocab_size, (2, 18))
        assert torch.equal(model(y)[:, :30], scaled[:, :30])  # causal prefix test under YaRN
        model.set_rope_scaling("none")
        again = model(x)
    assert not torch.allclose(base, scaled)
    assert torch.equal(base, again)


@pytest.mark.parametrize("args,key", [(("rotary", 2.0), "rope_scaling"), (("linear", 0.5), "rope_scaling factor"),
                                      (("yarn", 4.0, 0), "rope_scaling original_seq_len")])
def test_bad_rope_scaling_is_a_config_error(args, key):
    with pytest.raises(ConfigError) as err:
        build().set_rope_scaling(*args)
    assert err.value.key == key


# ---- document masking ------------------------------------------------------------------------
def packed_row(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """One row of documents of the given lengths (each ending in EOS) and its doc ids."""
    docs = [torch.cat([torch.randint(3, SMALL.vocab_size, (n - 1,)), torch.tensor([EOS])]) for n in lengths]
    ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    return torch.cat(docs)[None], ids[None]


def test_masked_packed_row_equals_each_document_alone():
    model = build(seed=1)
    lengths = [int(n) for n in np.random.randint(5, 30, size=4)]
    row, ids = packed_row(lengths)
    with torch.no_grad():
        packed = model(row, ids)[0]
        alone = torch.cat([model(doc[None])[0] for doc in row[0].split(lengths)])
        unmasked = model(row)[0]
    # RoPE is relative, so offsets change only rounding: q, k, v enter attention in bf16.
    torch.testing.assert_close(packed, alone, rtol=0, atol=3e-3)
    assert (unmasked[lengths[0]:] - alone[lengths[0]:]).abs().max() > 3e-2  # without the mask, docs mix


def test_document_masked_prefix_is_bit_identical_when_the_suffix_changes():
    model = build(seed=2)
    row, ids = packed_row([17, 9, 30, 8])
    t = int(np.random.randint(10, 50))
    other = row.clone()
    other[:, t + 1:] = torch.randint(3, SMALL.vocab_size, (1, row.shape[1] - t - 1))
    other_ids = ids.clone()
    other_ids[:, t + 1:] = ids[0, t] + 1  # the future may also be cut into other documents
    with torch.no_grad():
        assert torch.equal(model(row, ids)[:, : t + 1], model(other, other_ids)[:, : t + 1])


def test_document_attention_matches_per_document_sdpa_with_gqa():
    lengths = [40, 25, 63]
    q, k, v = (torch.randn(2, h, sum(lengths), 16) for h in (4, 2, 2))
    ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)]).expand(2, -1)
    out = flamia_attention(q, k, v, "bf16", doc_ids=ids)
    pieces = [F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True)
              for qs, ks, vs in zip(*(t.split(lengths, dim=2) for t in (q, k, v)), strict=True)]
    torch.testing.assert_close(out, torch.cat(pieces, dim=2), rtol=1e-5, atol=1e-5)
    assert [c.tolist() for c in cu_seqlens(ids)] == [[0, 40, 65, 128]] * 2


def test_fp8_document_masked_prefix_is_bit_identical_when_the_suffix_changes():
    """A quantized spec with document masking (FLAMIA kernels): model-level prefix test (FLAMIA.md
    test 4), the suffix's tokens and document cuts changed; the mask must change the logits."""
    model = build(seed=4, d_model=128, n_heads=2, n_kv_heads=1)  # head_dim 64: a FLAMIA kernel shape
    model.set_attention_specs(["fp8"] * SMALL.n_layers)
    row, ids = packed_row([60, 90, 106])
    t = int(np.random.randint(100, 200))
    other, other_ids = row.clone(), ids.clone()
    other[:, t + 1:] = torch.randint(3, SMALL.vocab_size, (1, row.shape[1] - t - 1))
    other_ids[:, t + 1:] = ids[0, t] + 1
    with torch.no_grad():
        packed = model(row, ids)
        assert torch.equal(packed[:, : t + 1], model(other, other_ids)[:, : t + 1])
        assert (packed[:, 60:] - model(row)[:, 60:]).abs().max() > 1e-2


class _Docs:
    """Random EOS-terminated documents, the interface PackedLoader reads."""

    kind, num_docs = "local", 40

    def __init__(self, seed: int):
        rng = np.random.default_rng(seed)
        self.docs = [np.append(rng.integers(3, 200, int(rng.integers(1, 90))), EOS).astype(np.int32)
                     for _ in range(self.num_docs)]

    def doc(self, epoch, k):
        return self.docs[k] if k < self.num_docs else None

    def forget(self, epoch, k):
        """Every document stays addressable."""

    def reset(self):
        """Nothing buffered."""


def test_loader_doc_ids_follow_document_boundaries_across_a_repack():
    loader = PackedLoader(_Docs(int(np.random.randint(1 << 30))), seq_len=128, micro_batch=2, rank=0, world_size=1)
    for seq_len, micro_batch in ((128, 2), (256, 1), (384, 3)):
        loader.set_seq_len(seq_len, micro_batch)
        inputs, targets, ids = loader.next_batch(doc_ids=True)
        assert ids.shape == inputs.shape == (micro_batch, seq_len) and (ids[:, 0] == 0).all()
        # a new document starts exactly at the token after an EOS
        assert torch.equal(ids[:, 1:] - ids[:, :-1], (inputs[:, :-1] == EOS).long())


@pytest.mark.gpu
def test_parallel_vs_autoregressive_gap_with_the_triton_kernels_on_gpu(monkeypatch):
    """FLAMIA.md test 7 on CUDA: the fp8 Triton path agrees token by token; safeguards off does not."""
    import functools

    import flamia_kernels

    from flamia_train.context_eval import parallel_vs_autoregressive

    torch.manual_seed(3)  # init_std 0.1: peaky attention, so a leak moves the loss (1.05 nats on the CPU reference)
    model = GPT(dataclasses.replace(SMALL, d_model=256, init_std=0.1)).cuda().eval()
    model.set_attention_specs(["fp8"] * SMALL.n_layers)
    row = torch.randint(3, SMALL.vocab_size, (257,), device="cuda")
    safe = parallel_vs_autoregressive(model, row, flamia_kernels.SEQ_BLOCK)["max_token_gap"]
    monkeypatch.setattr(flamia_kernels, "flamia_attention",
                        functools.partial(flamia_kernels.flamia_attention, safeguards=False))
    leaky = parallel_vs_autoregressive(model, row, flamia_kernels.SEQ_BLOCK)["max_token_gap"]
    assert safe <= 1e-3 and leaky > 10 * max(safe, 1e-3), (safe, leaky)
