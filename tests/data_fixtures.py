"""Helpers for tests/test_data.py: random documents, writers for each file format, stream reconstruction."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

# Letters, digits, punctuation, indentation and a few characters outside any small vocab
# (accents, CJK, emoji) so byte fallback is exercised.
_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,:;()[]{}=+-*/#'\" "
_RARE = "éüßøλΩж中文字😀→∑"


def random_text(rng: random.Random, min_words: int = 5, max_words: int = 80) -> str:
    """A random multi-line document; never empty or whitespace-only."""
    lines, words = [], rng.randint(min_words, max_words)
    while words > 0:
        n = min(words, rng.randint(1, 12))
        line = " ".join(
            "".join(rng.choice(_ALPHABET if rng.random() > 0.03 else _RARE) for _ in range(rng.randint(1, 9)))
            for _ in range(n)
        )
        lines.append(" " * rng.choice([0, 0, 4, 8]) + line.strip() + rng.choice(["", "", "\t"]))
        words -= n
    return "x" + "\n".join(lines)


def random_docs(rng: random.Random, n: int, max_words: int = 80) -> list[str]:
    """n distinct random documents."""
    docs: set[str] = set()
    while len(docs) < n:
        docs.add(random_text(rng, max_words=max_words))
    return sorted(docs, key=lambda _: rng.random())


def write_jsonl(path: Path, docs: list[str], field: str = "text") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for i, doc in enumerate(docs):
            fh.write(json.dumps({field: doc, "id": i}) + "\n")
    return path


def write_txt_dir(folder: Path, docs: list[str]) -> Path:
    """One .txt file per document (the text builder reads each file as one document)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, doc in enumerate(docs):
        (folder / f"doc{i:04d}.txt").write_text(doc, encoding="utf-8")
    return folder


def write_parquet(path: Path, docs: list[str]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": docs, "n": list(range(len(docs)))}), path, row_group_size=7)
    return path


def rows_of(batch) -> torch.Tensor:
    """(inputs, targets) -> the full rows [B, S+1] they were cut from, checking the shift."""
    x, y = batch
    assert x.dtype == torch.long and y.dtype == torch.long and x.shape == y.shape
    assert torch.equal(x[:, 1:], y[:, :-1]), "targets must be inputs shifted by one"
    return torch.cat([x[:, :1], y], dim=1)


def global_rows(loaders, steps: int) -> list[torch.Tensor]:
    """Rows of `steps` steps of simulated ranks, in global order (rank r's i-th row is row r + W*i)."""
    out = []
    for _ in range(steps):
        per_rank = [rows_of(ld.next_batch()) for ld in loaders]
        for i in range(per_rank[0].shape[0]):
            out.extend(rows[i] for rows in per_rank)
    return out


def stream_from_rows(rows: list[torch.Tensor]) -> list[int]:
    """Undo the packing of consecutive rows (each shares its first token with the previous row's last)."""
    stream = rows[0].tolist()
    for prev, row in zip(rows[:-1], rows[1:], strict=True):
        assert row[0] == prev[-1], "consecutive rows must overlap by exactly one token"
        stream.extend(row[1:].tolist())
    return stream


def split_docs(tokens: list[int], eos: int) -> list[list[int]]:
    """Documents of an EOS-terminated token stream (a trailing partial document is dropped)."""
    docs, cur = [], []
    for t in tokens:
        if t == eos:
            docs.append(cur)
            cur = []
        else:
            cur.append(t)
    return docs
