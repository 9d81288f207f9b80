"""Where documents come from: local files, save_to_disk directories and the hub, checked and tokenized.

    files (.txt/.jsonl/.json/.parquet) ─▶ load_dataset(builder) ─┐
    disk / stdlib (save_to_disk)        ─▶ load_from_disk ────────┼─▶ split ─▶ tokenize once (datasets.map,
                                                                  │            cached arrow) ─▶ Dataset{"ids"}
    hub (streaming=True)                ─▶ IterableDataset ───────┴─▶ split ─▶ texts, tokenized on the fly

Every document's token list ends with EOS. A source with no held-out split gets
one carved out: a document is held out when a keyed hash of its *text* falls
below `heldout_fraction`, so the choice survives any reordering (shard or
buffer shuffles) and exact duplicates never straddle the split. The token cache
is keyed by the source files, the tokenizer's bytes and the split rule; it is
written next to the prepared corpus (stdlib), under `cache_dir`, or in the HF
datasets cache, never into a user's source directory.
"""

from __future__ import annotations

import glob
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from flamia_train.data_corpus import is_prepared
from flamia_train.errors import DataError

if TYPE_CHECKING:
    from flamia_train.data import DataConfig
    from flamia_train.data_tokenizer import Tokenizer

SOURCES = ("stdlib", "files", "disk", "hub")
FILE_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
CACHE_VERSION = 1
STREAM_SHUFFLE_BUFFER = 10_000  # documents held by the hub stream's shuffle buffer
_UTF8_CHUNK = 1 << 20


def check_source(cfg: DataConfig) -> None:
    """Raise DataError unless cfg.source is known and its inputs exist (cheap: no data is read)."""
    if cfg.source not in SOURCES:
        raise DataError(f"data.source = {cfg.source!r} is unknown; allowed: {', '.join(SOURCES)}")
    if cfg.source == "stdlib" and not is_prepared(Path(cfg.path)):
        raise DataError(
            f"data.path '{cfg.path}' holds no prepared stdlib corpus; run scripts/prepare_data.py"
        )
    if cfg.source == "files":
        resolve_files(cfg.path)
    if cfg.source == "disk" and not _is_saved_dataset(Path(cfg.path)):
        raise DataError(
            f"data.path '{cfg.path}' is not a dataset written by save_to_disk "
            "(allowed: a directory with dataset_dict.json or state.json)"
        )
    if cfg.source == "hub" and not cfg.hub_name:
        raise DataError("data.hub_name is empty; allowed: a hub dataset name or a local dataset directory")


def resolve_files(path: str) -> tuple[str, list[str]]:
    """(datasets builder name, sorted files) for a file, a directory or a glob of one text format."""
    p = Path(path)
    allowed = ", ".join(FILE_BUILDERS)
    if p.is_file():
        files = [p]
    elif p.is_dir():
        found = sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
        files = [f for f in found if f.suffix.lower() in FILE_BUILDERS]
        if not files:
            names = ", ".join(f.name for f in found[:5]) or "nothing"
            raise DataError(f"data.path '{path}' holds no {allowed} files (found: {names})")
    else:
        files = sorted(Path(f) for f in glob.glob(path, recursive=True) if Path(f).is_file())
        if not files:
            raise DataError(
                f"data.path '{path}' does not exist or matches no files; allowed: a file, "
                f"directory or glob of {allowed} files"
            )
    for f in files:
        if f.suffix.lower() not in FILE_BUILDERS:
            raise DataError(f"data file '{f}' has an unsupported extension; allowed: {allowed}")
    # Zero-byte files hold no documents and trip some datasets builders: skip them.
    nonempty = [f for f in files if f.stat().st_size > 0]
    if not nonempty:
        raise DataError(f"data.path '{path}' is empty: its {len(files)} file(s) have 0 bytes")
    files = nonempty
    builders = {FILE_BUILDERS[f.suffix.lower()] for f in files}
    if len(builders) > 1:
        raise DataError(f"data.path '{path}' mixes formats {sorted(builders)}; allowed: one format per path")
    return builders.pop(), [str(f) for f in files]


def _root_cause(exc: BaseException) -> str:
    """'Type: message' of each exception under the outermost one (or of it, alone).

    datasets wraps a JSON syntax error in a DatasetGenerationError ("An error occurred while
    generating the dataset") that names no cause; the chain below it says which row is bad.
    """
    chain = [exc]
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and len(chain) < 5:
        chain.append(nxt)
    return "; ".join(f"{type(e).__name__}: {e}" for e in (chain[1:] or chain))


def check_readable(builder: str, files: list[str]) -> None:
    """DataError for a binary or non-UTF-8 text file, or a parquet file pyarrow cannot read."""
    for name in files:
        if builder == "parquet":
            import pyarrow.parquet as pq

            try:
                pq.read_schema(name)
            except Exception as exc:  # pyarrow raises several types for a damaged file
                raise DataError(f"data file '{name}' is not a readable parquet file ({exc})") from None
            continue
        _check_utf8(name)


def _check_utf8(name: str) -> None:
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    with open(name, "rb") as fh:
        while chunk := fh.read(_UTF8_CHUNK):
            if b"\x00" in chunk:
                raise DataError(
                    f"data file '{name}' looks binary (NUL byte near offset {offset}); allowed: UTF-8 text"
                )
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                raise DataError(
                    f"data file '{name}' is not UTF-8 (bad byte at offset {offset + exc.start}); "
                    "allowed: UTF-8 text"
                ) from None
            offset += len(chunk)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise DataError(
            f"data file '{name}' is not UTF-8 (truncated at its end); allowed: UTF-8 text"
        ) from None


def _is_saved_dataset(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()


def open_local(cfg: DataConfig) -> dict:
    """The splits a local source holds, as {name: datasets.Dataset} (a lone dataset is `cfg.split`)."""
    import datasets

    check_source(cfg)
    try:
        if cfg.source == "files":
            builder, files = resolve_files(cfg.path)
            check_readable(builder, files)
            extra = {"sample_by": "document"} if builder == "text" else {}
            hf_cache = str(Path(cfg.cache_dir) / "hf") if cfg.cache_dir else None
            ds = datasets.load_dataset(builder, data_files=files, split="train", cache_dir=hf_cache, **extra)
        else:
            ds = datasets.load_from_disk(cfg.path)
    except DataError:
        raise
    except Exception as exc:  # datasets wraps parse errors in several exception types
        raise DataError(f"could not load data.path '{cfg.path}' ({_root_cause(exc)})") from None
    return dict(ds) if isinstance(ds, datasets.DatasetDict) else {cfg.split: ds}


def open_stream(cfg: DataConfig) -> dict:
    """The splits of `cfg.hub_name` as {name: datasets.IterableDataset}, opened with streaming=True."""
    import datasets

    check_source(cfg)
    try:
        dd = datasets.load_dataset(cfg.hub_name, cfg.hub_config or None, streaming=True)
    except Exception as exc:  # network, missing dataset, bad config name: all user input
        raise DataError(
            f"could not open data.hub_name '{cfg.hub_name}' "
            f"(config {cfg.hub_config!r}): {type(exc).__name__}: {exc}"
        ) from None
    return dict(dd)


def select_split(splits: dict, cfg: DataConfig, split: str):
    """(dataset, carve) for `split`: carve is None, 'train' or 'heldout' (hash-carved from cfg.split)."""
    if split in splits:
        carve = "train" if split == cfg.split and cfg.heldout_split not in splits else None
        return splits[split], carve
    if split == cfg.heldout_split and cfg.split in splits:
        return splits[cfg.split], "heldout"
    raise DataError(f"split {split!r} not found in '{cfg.hub_name or cfg.path}'; found: {sorted(splits)}")


def is_heldout(text: str, seed: int, fraction: float) -> bool:
    """Whether a document belongs to a carved held-out split: a keyed hash of its text < fraction."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=str(seed).encode()).digest()
    return int.from_bytes(digest, "little") / 2**64 < fraction


def _keep(carve: str | None, text, cfg: DataConfig) -> bool:
    if not isinstance(text, str) or not text.strip():
        return False
    return carve is None or is_heldout(text, cfg.seed, cfg.heldout_fraction) == (carve == "heldout")


def _check_text_column(columns, cfg: DataConfig, where: str) -> None:
    if columns is not None and cfg.text_field not in columns:
        raise DataError(
            f"data.text_field = {cfg.text_field!r} is not a column of '{where}'; "
            f"columns found: {sorted(columns)}"
        )


def tokenized_split(cfg: DataConfig, tokenizer: Tokenizer, split: str):
    """A Dataset with one column `ids` (int32 token list + EOS per non-empty document), cached on disk."""
    import datasets

    ds, carve = select_split(open_local(cfg), cfg, split)
    _check_text_column(ds.column_names, cfg, cfg.path)
    feature = ds.features[cfg.text_field]
    if getattr(feature, "dtype", None) not in ("string", "large_string"):
        raise DataError(f"column {cfg.text_field!r} of '{cfg.path}' holds {feature}, not text")
    key = _cache_key(ds, cfg, tokenizer, split, carve)
    cache = _cache_dir(cfg) / f"{split}-{key}.arrow"
    if cache.is_file():
        out = datasets.Dataset.from_file(str(cache))
    else:
        cache.parent.mkdir(parents=True, exist_ok=True)
        eos = tokenizer.eos_id

        def encode(batch):
            texts = [t for t in batch[cfg.text_field] if _keep(carve, t, cfg)]
            return {"ids": [np.asarray(ids + [eos], dtype=np.int32) for ids in tokenizer.encode_batch(texts)]}

        out = ds.map(
            encode,
            batched=True,
            batch_size=1000,
            remove_columns=ds.column_names,
            cache_file_name=str(cache),
            new_fingerprint=key,
            desc=f"tokenizing {split}",
        )
    if len(out) == 0:
        hint = " (none fell in data.heldout_fraction)" if carve == "heldout" else ""
        raise DataError(f"split {split!r} of '{cfg.path}' has no documents with non-empty text{hint}")
    return out


def stream_texts(cfg: DataConfig, split: str, epoch: int) -> Iterator[str]:
    """Non-empty texts of `split` in the seeded shuffle order of `epoch`, streamed from the hub."""
    ds, carve = select_split(open_stream(cfg), cfg, split)
    _check_text_column(ds.column_names, cfg, cfg.hub_name)
    ds = ds.shuffle(seed=cfg.seed, buffer_size=STREAM_SHUFFLE_BUFFER)
    ds.set_epoch(epoch)
    for example in ds:
        if cfg.text_field not in example:
            _check_text_column(example.keys(), cfg, cfg.hub_name)
        if _keep(carve, example[cfg.text_field], cfg):
            yield example[cfg.text_field]


def _cache_dir(cfg: DataConfig) -> Path:
    if cfg.cache_dir:
        return Path(cfg.cache_dir) / "tokenized"
    if cfg.source == "stdlib":
        return Path(cfg.path) / "tokenized"
    import datasets

    return Path(datasets.config.HF_DATASETS_CACHE) / "flamia_tokenized"


def _cache_key(ds, cfg: DataConfig, tokenizer: Tokenizer, split: str, carve: str | None) -> str:
    """Hash of everything the tokenized split depends on, so a stale cache is never read."""
    files = []
    for entry in ds.cache_files:
        stat = Path(entry["filename"]).stat()
        files.append([str(Path(entry["filename"]).resolve()), stat.st_size, stat.st_mtime_ns])
    rule = [carve, cfg.seed, cfg.heldout_fraction] if carve else None
    ident = [
        CACHE_VERSION,
        files,
        len(ds),
        cfg.text_field,
        split,
        rule,
        hashlib.sha256(tokenizer.path.read_bytes()).hexdigest(),
    ]
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:20]
