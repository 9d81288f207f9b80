"""Our `gpt-1b` shape inside torchtitan, through torchtitan's own extension hook (issue 6, item 2).

torchtitan imports this module when run with ``--experimental.custom_import torchtitan_gpt1b``
(scripts/ on PYTHONPATH); it registers the train spec ``flamia_gpt1b``: torchtitan's Llama 3
model, parallelization (FSDP2, activation checkpointing, torch.compile), optimizer, LR schedule
and loss, unchanged, with one flavor and one data source added:

- flavor ``gpt1b``: configs/model/gpt-1b.yaml's shape (d_model 2048, 20 layers, 16 query / 8 KV
  heads of 128, SwiGLU width 5504, vocab 32768, RoPE θ 10000). One difference: torchtitan's
  Llama keeps a separate output projection where ours ties it to the embedding (+67M
  parameters and their AdamW state; the same FLOPs per token).
- data: uniform random tokens (``SyntheticTokens``), as scripts/bench_train.py's default, so
  neither side spends time on data and no tokenizer is needed (torchtitan builds none when the
  spec has no tokenizer builder).

scripts/bench_torchtitan.py launches it and reads torchtitan's own tokens/s log. Never imported
by the package.
"""
from __future__ import annotations

import dataclasses

import torch
from torch.distributed.checkpoint.stateful import Stateful
from torch.utils.data import IterableDataset
from torchtitan.components.dataloader import ParallelAwareDataloader
from torchtitan.models import llama3
from torchtitan.models.llama3.model.args import TransformerModelArgs
from torchtitan.protocols.train_spec import register_train_spec

SPEC_NAME = "flamia_gpt1b"
GPT1B = TransformerModelArgs(dim=2048, n_layers=20, n_heads=16, n_kv_heads=8, vocab_size=32768, multiple_of=64,
                             ffn_dim_multiplier=None, norm_eps=1e-5, rope_theta=10000.0)


class SyntheticTokens(IterableDataset, Stateful):
    """Endless rows of seq_len + 1 uniform random tokens, deterministic per (seed, rank, row)."""

    def __init__(self, vocab_size: int, seq_len: int, rank: int, seed: int = 0):
        self.vocab_size, self.seq_len, self.rank, self.seed, self.rows = vocab_size, seq_len, rank, seed, 0

    def __iter__(self):
        while True:
            gen = torch.Generator().manual_seed((self.seed * 1_000_003 + self.rank) * 1_000_003 + self.rows)
            self.rows += 1
            row = torch.randint(self.vocab_size, (self.seq_len + 1,), generator=gen)
            yield {"input": row[:-1]}, row[1:]

    def state_dict(self) -> dict:
        return {"rows": self.rows}

    def load_state_dict(self, state_dict: dict) -> None:
        self.rows = int(state_dict["rows"])


def build_synthetic_dataloader(dp_world_size: int, dp_rank: int, tokenizer, job_config, infinite: bool = True):
    """torchtitan's dataloader builder signature; `tokenizer` is None here (no tokenizer builder)."""
    dataset = SyntheticTokens(GPT1B.vocab_size, job_config.training.seq_len, dp_rank)
    return ParallelAwareDataloader(dataset, dp_rank=dp_rank, dp_world_size=dp_world_size,
                                   batch_size=job_config.training.local_batch_size)


def _register() -> None:
    base = llama3.get_train_spec()
    flavors = {"gpt1b": GPT1B}
    spec = dataclasses.replace(base, model_args=flavors, build_dataloader_fn=build_synthetic_dataloader,
                               build_tokenizer_fn=None, build_validator_fn=None)
    register_train_spec(SPEC_NAME, spec)


_register()
