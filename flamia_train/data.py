"""Data: config, corpus preparation, tokenizer and the packed, rank-sharded, resumable loader.

    DataConfig ─▶ ensure_default_corpus (rank 0 builds the stdlib corpus / warms the token cache)
               ─▶ build_tokenizer ─▶ Tokenizer (sentencepiece)
               ─▶ build_loader(split, seq_len, micro_batch, rank, world_size) ─▶ PackedLoader
                    local:  tokenized once (datasets.map, cached) ─▶ LocalDocs (random access)
                    hub:    streamed, tokenized on the fly        ─▶ StreamDocs (sequential)

This file is the public face; the work lives in data_corpus (the embedded
corpus), data_tokenizer, data_sources (files / disk / hub, splits, token cache)
and data_loader (packing, sharding, state). docs/data.md describes the formats
and the resume semantics.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flamia_train.data_corpus import MANIFEST, CorpusPaths, corpus_lines, is_prepared, prepare_default_corpus
from flamia_train.data_loader import LocalDocs, PackedLoader, StreamDocs
from flamia_train.data_sources import (
    SOURCES,
    check_source,
    open_stream,
    select_split,
    stream_texts,
    tokenized_split,
)
from flamia_train.data_tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    check_vocab,
    train_tokenizer,
)
from flamia_train.errors import DataError

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "SOURCES",
    "CorpusPaths",
    "DataConfig",
    "PackedLoader",
    "Tokenizer",
    "build_loader",
    "build_tokenizer",
    "check_vocab",
    "ensure_default_corpus",
    "prepare_default_corpus",
]


@dataclass
class DataConfig:
    """Where the training text comes from and how it is tokenized (Hydra group `data`)."""

    name: str = "stdlib"  # label for logs and run names
    source: str = "stdlib"  # stdlib | files | disk | hub
    # stdlib: output dir of the prepared corpus; files: a file, dir or glob of .txt/.jsonl/.json/.parquet;
    # disk: a save_to_disk dir. Relative paths are relative to the current working directory.
    path: str = "data/stdlib"
    hub_name: str = ""  # hub: dataset name (or a local dataset dir) for load_dataset(..., streaming=True)
    hub_config: str = ""  # hub: dataset config name ("" = the default)
    split: str = "train"  # training split
    heldout_split: str = "heldout"  # eval split; carved from `split` by heldout_fraction when absent
    text_field: str = "text"  # column holding the document text (jsonl / parquet / disk / hub)
    tokenizer: str = "data/stdlib/tokenizer.model"  # sentencepiece model file
    vocab_size: int = 8192  # vocab of the tokenizer trained for the stdlib corpus
    heldout_fraction: float = 0.01  # fraction of documents held out when a source has no held-out split
    max_corpus_mb: float = 0.0  # cap on the stdlib corpus size in MB (0 = all of it; tests cap it)
    seed: int = 1234  # seeds the corpus sample, split hash, tokenizer training and per-epoch shuffles
    cache_dir: str = ""  # token cache ("" = <path>/tokenized for stdlib, the HF datasets cache otherwise)


def build_tokenizer(cfg: DataConfig) -> Tokenizer:
    """Load cfg.tokenizer; DataError when it is missing or not a sentencepiece model."""
    return Tokenizer(cfg.tokenizer)


def ensure_default_corpus(cfg: DataConfig, is_main: bool, barrier: Callable[[], None], log=print) -> None:
    """Make the data named by `cfg` usable on every rank, or raise DataError on every rank.

    stdlib: if the corpus or tokenizer is missing, rank 0 builds it (others wait on
    `barrier`); an existing directory that is not a prepared corpus is never touched.
    Other sources: the paths must exist. Rank 0 then tokenizes the local splits once so
    the other ranks (and later runs) read the token cache. All ranks call `barrier` once.
    """
    if cfg.source not in SOURCES:
        check_source(cfg)  # raises the unknown-source error
    corpus = Path(cfg.path)
    tokenizer = Path(cfg.tokenizer)
    if cfg.source == "stdlib":
        if corpus.exists() and not is_prepared(corpus) and (corpus.is_file() or any(corpus.iterdir())):
            raise DataError(
                f"data.path '{corpus}' exists but is not a prepared stdlib corpus; it is left "
                "untouched: move it away or point data.path elsewhere"
            )
    else:
        check_source(cfg)
        build_tokenizer(cfg)
    if is_main:
        if cfg.source == "stdlib":
            _build_stdlib(cfg, log)
        if cfg.source != "hub":
            tok = build_tokenizer(cfg)
            for split in (cfg.split, cfg.heldout_split):
                tokenized_split(cfg, tok, split)
    barrier()
    check_source(cfg)
    if not tokenizer.is_file():
        raise DataError(f"tokenizer '{tokenizer}' is missing after preparation (rank 0 should have built it)")


def _build_stdlib(cfg: DataConfig, log) -> None:
    corpus, tokenizer = Path(cfg.path), Path(cfg.tokenizer)
    if is_prepared(corpus):
        made = json.loads((corpus / MANIFEST).read_text())
        wanted = {"vocab_size": cfg.vocab_size, "max_corpus_mb": cfg.max_corpus_mb, "seed": cfg.seed}
        differs = {k: made.get(k) for k, v in wanted.items() if made.get(k) != v}
        if differs:  # reused as is: rebuilding would mean deleting the user's prepared files
            log(f"[data] note: {corpus} was prepared with {differs}, not {wanted}; using it as is")
    else:
        log(
            f"[data] preparing the embedded stdlib corpus in {corpus} (vocab {cfg.vocab_size}, "
            f"max {cfg.max_corpus_mb or 'all'} MB)"
        )
        prepare_default_corpus(
            corpus, cfg.vocab_size, cfg.max_corpus_mb, cfg.seed, cfg.heldout_fraction, log=log
        )
    if not tokenizer.is_file():
        from datasets import load_from_disk

        log(f"[data] training a tokenizer for {corpus} into {tokenizer} (vocab {cfg.vocab_size})")
        texts = load_from_disk(str(corpus))["train"]["text"]
        report = train_tokenizer(corpus_lines(texts), tokenizer, cfg.vocab_size, cfg.seed)
        log(f"[data] tokenizer ready: vocab {report['vocab_size']} in {report['seconds']} s")


def build_loader(
    cfg: DataConfig,
    tokenizer: Tokenizer,
    split: str,
    seq_len: int,
    micro_batch: int,
    rank: int,
    world_size: int,
) -> PackedLoader:
    """A PackedLoader over `split`: this rank's (inputs, targets), each LongTensor[micro_batch, seq_len]."""
    name = f"{cfg.name}:{split}"
    if cfg.source == "hub":
        select_split(open_stream(cfg), cfg, split)  # fail now, not at the first batch
        docs = StreamDocs(lambda epoch: stream_texts(cfg, split, epoch), tokenizer, name)
    else:
        docs = LocalDocs(tokenized_split(cfg, tokenizer, split), cfg.seed)
    return PackedLoader(
        docs, seq_len=seq_len, micro_batch=micro_batch, rank=rank, world_size=world_size, name=name
    )
