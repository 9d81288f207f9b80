"""The embedded default corpus: text every Python install carries, turned into a dataset and a tokenizer.

    stdlib *.py sources ─┐
    module docstrings  ──┼─▶ documents ─▶ cap (max_corpus_mb) ─▶ train / heldout ─▶ save_to_disk
    pydoc_data topics  ──┘                                          │
                                                                    └─▶ BPE tokenizer (train split)

Everything is deterministic given (Python version, seed): documents are grouped
by module, groups are sampled and split by a keyed hash of their name, so a
module's source and its docstring always land on the same side of the split and
the held-out split never leaks into training. The output directory is written
under a temporary name and renamed when complete; `corpus.json` marks it ours.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import os
import shutil
import sys
import sysconfig
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path

from flamia_train.data_tokenizer import MIN_VOCAB, train_tokenizer
from flamia_train.errors import ConfigError, DataError

MANIFEST = "corpus.json"
FORMAT = "flamia-stdlib-corpus/1"
TOKENIZER_FILE = "tokenizer.model"
# Paths under the stdlib directory that are installed packages or duplicated text, not the stdlib.
_SKIP_PARTS = {"site-packages", "dist-packages", "__pycache__"}
_TOPICS_FILE = "pydoc_data/topics.py"


@dataclass(frozen=True)
class CorpusPaths:
    """Where a prepared corpus lives: the save_to_disk directory and the tokenizer model."""

    dataset_dir: Path
    tokenizer: Path


def is_prepared(out_dir: Path) -> bool:
    """True when `out_dir` holds a complete corpus written by `prepare_default_corpus`."""
    manifest = Path(out_dir) / MANIFEST
    try:
        return json.loads(manifest.read_text()).get("format") == FORMAT
    except (OSError, ValueError):
        return False


def prepare_default_corpus(
    out_dir: str | os.PathLike,
    vocab_size: int = 8192,
    max_corpus_mb: float = 0.0,
    seed: int = 1234,
    heldout_fraction: float = 0.01,
    log=print,
) -> CorpusPaths:
    """Build the stdlib corpus under `out_dir`: DatasetDict(train, heldout) plus tokenizer.model.

    `max_corpus_mb` caps the UTF-8 size of the corpus (0 = everything, ~30 MB with the
    stdlib's tests). Returns the paths; an existing complete corpus is reused as is.
    Raises DataError if `out_dir` exists and is not a corpus we wrote (it is never touched).
    """
    from datasets import Dataset, DatasetDict

    out = Path(out_dir)
    paths = CorpusPaths(out, out / TOKENIZER_FILE)
    if is_prepared(out):
        log(f"[data] corpus already prepared at {out}")
        return paths
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DataError(
            f"'{out}' exists but is not a complete prepared corpus (no valid {MANIFEST}); "
            "it is left untouched: move it away or point data.path elsewhere"
        )
    if vocab_size < MIN_VOCAB:  # fail before minutes of work, not after
        raise ConfigError(
            "data.vocab_size", vocab_size, f"must be >= {MIN_VOCAB} (256 byte pieces + specials)"
        )
    start = time.time()
    groups = _sample_groups(collect_documents(), max_corpus_mb, seed)
    split = _split_groups(groups, seed, heldout_fraction)
    rows = {name: {"text": [], "source": []} for name in ("train", "heldout")}
    for group, docs in groups.items():
        for source, text in docs:
            rows[split[group]]["text"].append(text)
            rows[split[group]]["source"].append(source)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    try:
        dd = DatasetDict({name: Dataset.from_dict(cols) for name, cols in rows.items()})
        dd.save_to_disk(str(tmp))
        log(f"[data] wrote {_sizes(rows)} to {out}")
        tok = train_tokenizer(corpus_lines(rows["train"]["text"]), tmp / TOKENIZER_FILE, vocab_size, seed)
        log(f"[data] BPE tokenizer: vocab {tok['vocab_size']} (asked {vocab_size}) in {tok['seconds']} s")
        manifest = {
            "format": FORMAT,
            "python": sys.version.split()[0],
            "vocab_size": vocab_size,
            "max_corpus_mb": max_corpus_mb,
            "seed": seed,
            "heldout_fraction": heldout_fraction,
            "splits": {k: {"documents": len(v["text"]), "mb": _mb(v["text"])} for k, v in rows.items()},
            "tokenizer": tok,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        os.rename(tmp, out)
    finally:
        if tmp.exists():  # only our own temporary directory, after a failure
            shutil.rmtree(tmp, ignore_errors=True)
    log(f"[data] corpus ready in {time.time() - start:.1f} s")
    return paths


def corpus_lines(texts):
    """Non-blank lines of `texts`: the sentences the tokenizer trainer samples from."""
    for text in texts:
        for line in text.split("\n"):
            if line.strip():
                yield line


def collect_documents() -> dict[str, list[tuple[str, str]]]:
    """Documents of this Python install, grouped by module: {group: [(source, text), ...]}."""
    root = Path(sysconfig.get_paths()["stdlib"])
    groups: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if _SKIP_PARTS.intersection(path.relative_to(root).parts) or rel == _TOPICS_FILE:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # a few test fixtures are deliberately in other encodings
        if not text.strip():
            continue
        docs = [(rel, text)]
        doc = _module_docstring(text)
        if doc:
            docs.append((f"{rel}#docstring", f"Module {rel[:-3].replace('/', '.')}\n\n{doc}\n"))
        groups[rel] = docs
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions strip pydoc_data
        topics = {}
    for name in sorted(topics):
        groups[f"pydoc:{name}"] = [(f"{_TOPICS_FILE}#{name}", topics[name])]
    if not groups:
        raise DataError(f"found no readable .py files under the stdlib directory '{root}'")
    return groups


def _module_docstring(source: str) -> str | None:
    """The module docstring, read with the tokenizer only as far as the first statement."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENCODING):
                continue
            if tok.type == tokenize.STRING:
                value = ast.literal_eval(tok.string)
                return value.strip() if isinstance(value, str) else None
            return None
    except (tokenize.TokenError, SyntaxError, ValueError):
        return None
    return None


def _key(seed: int, salt: str, name: str) -> float:
    """A uniform number in [0, 1) fixed by (seed, salt, name): the same on every machine."""
    digest = hashlib.blake2b(f"{seed}:{salt}:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


def _sample_groups(groups, max_corpus_mb: float, seed: int):
    """Keep whole groups, in keyed-hash order, until the UTF-8 size reaches `max_corpus_mb`."""
    if max_corpus_mb <= 0:
        return groups
    budget = max_corpus_mb * 2**20
    kept, used = {}, 0
    for name in sorted(groups, key=lambda g: _key(seed, "sample", g)):
        if used >= budget:
            break
        kept[name] = groups[name]
        used += sum(len(text.encode("utf-8")) for _, text in groups[name])
    return kept


def _split_groups(groups, seed: int, fraction: float) -> dict[str, str]:
    """'heldout' for groups whose key < fraction, topped up in key order to >= fraction of the bytes.

    The top-up keeps a small capped corpus from getting a held-out split of a few
    hundred tokens; both splits are kept non-empty.
    """
    if len(groups) < 2:
        raise DataError("the stdlib corpus needs at least two modules; raise data.max_corpus_mb")
    size = {g: sum(len(text.encode("utf-8")) for _, text in docs) for g, docs in groups.items()}
    ranked = sorted(groups, key=lambda g: _key(seed, "heldout", g))
    split, held, total = {}, 0, sum(size.values())
    for i, name in enumerate(ranked):
        take = i == 0 or _key(seed, "heldout", name) < fraction or held < fraction * total
        split[name] = "heldout" if take and i < len(ranked) - 1 else "train"
        held += size[name] if take else 0
    return split


def _mb(texts) -> float:
    return round(sum(len(t.encode("utf-8")) for t in texts) / 2**20, 2)


def _sizes(rows) -> str:
    return ", ".join(f"{k}: {len(v['text'])} docs / {_mb(v['text'])} MB" for k, v in rows.items())
