"""Data pipeline: corpus preparation, tokenizer, sources, packing, sharding, resume and bad inputs."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import torch
from data_fixtures import (
    global_rows,
    random_docs,
    random_text,
    rows_of,
    split_docs,
    stream_from_rows,
    write_jsonl,
    write_parquet,
    write_txt_dir,
)

from flamia_train.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    DataConfig,
    Tokenizer,
    build_loader,
    build_tokenizer,
    check_vocab,
    ensure_default_corpus,
    prepare_default_corpus,
)
from flamia_train.data_sources import is_heldout
from flamia_train.errors import ConfigError, DataError


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """A small stdlib corpus (~1 MB, vocab 512), prepared once per session."""
    out = tmp_path_factory.mktemp("corpus") / "stdlib"
    paths = prepare_default_corpus(out, vocab_size=512, max_corpus_mb=1.0, seed=7, log=lambda *_: None)
    return paths


@pytest.fixture(scope="session")
def tok(corpus):
    return Tokenizer(corpus.tokenizer)


@pytest.fixture
def rng():
    return random.Random()


def _stdlib_cfg(corpus, tmp_path, **kw):
    return DataConfig(
        path=str(corpus.dataset_dir),
        tokenizer=str(corpus.tokenizer),
        seed=7,
        cache_dir=str(tmp_path / "cache"),
        **kw,
    )


def _files_cfg(path, tok, tmp_path, **kw):
    kw.setdefault("heldout_fraction", 0.3)
    kw.setdefault("source", "files")
    return DataConfig(
        name="t",
        path=str(path),
        tokenizer=str(tok.path),
        cache_dir=str(tmp_path / "cache"),
        seed=random.randrange(1 << 30),
        **kw,
    )


def _epoch_texts(cfg, tok, split):
    """The decoded documents of one full epoch of `split` (W=1, B=1), checking the packing on the way."""
    loader = build_loader(cfg, tok, split, seq_len=32, micro_batch=1, rank=0, world_size=1)
    rows = []
    while loader.epoch == 0:
        rows.extend(global_rows([loader], 1))
    docs = split_docs(stream_from_rows(rows), tok.eos_id)
    return [tok.decode(d) for d in docs[: loader.docs.num_docs]]


# ---------------------------------------------------------------- corpus and tokenizer


def test_corpus_layout_and_manifest(corpus):
    from datasets import load_from_disk

    dd = load_from_disk(str(corpus.dataset_dir))
    assert set(dd) == {"train", "heldout"}
    assert len(dd["train"]) > 10 and len(dd["heldout"]) >= 1
    sources = {s.split("#")[0] for split in dd.values() for s in split["source"]}
    train_src = {s.split("#")[0] for s in dd["train"]["source"]}
    held_src = {s.split("#")[0] for s in dd["heldout"]["source"]}
    assert not train_src & held_src, "a module must not straddle the split"
    assert any(s.endswith(".py") for s in sources)
    manifest = json.loads((corpus.dataset_dir / "corpus.json").read_text())
    assert manifest["vocab_size"] == 512 and manifest["splits"]["train"]["mb"] <= 1.2


def test_tokenizer_specials_and_round_trip(tok, rng):
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
    assert tok.vocab_size == 512
    for _ in range(20):
        text = random_text(rng)
        ids = tok.encode(text)
        assert all(0 <= i < tok.vocab_size for i in ids)
        assert tok.decode(ids) == text
    assert tok.encode_batch(["    def f():", "x"]) == [tok.encode("    def f():"), tok.encode("x")]


def test_prepare_is_idempotent_and_never_overwrites(corpus, tmp_path):
    before = corpus.tokenizer.stat().st_mtime_ns
    again = prepare_default_corpus(
        corpus.dataset_dir, vocab_size=512, max_corpus_mb=1.0, seed=7, log=lambda *_: None
    )
    assert again == corpus and corpus.tokenizer.stat().st_mtime_ns == before
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("user data")
    with pytest.raises(DataError, match="mine"):
        prepare_default_corpus(foreign, vocab_size=512, max_corpus_mb=0.2)
    assert (foreign / "notes.txt").read_text() == "user data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"], "no temporary directory may be left"


def test_ensure_default_corpus(corpus, tmp_path):
    calls, logs = [], []
    cfg = _stdlib_cfg(corpus, tmp_path)
    ensure_default_corpus(cfg, is_main=False, barrier=lambda: calls.append(1), log=logs.append)
    assert calls == [1] and logs == []
    ensure_default_corpus(cfg, is_main=True, barrier=lambda: None, log=logs.append)
    assert len(logs) == 1 and "prepared with {'vocab_size': 512" in logs[0], (
        "a reused corpus says how it differs"
    )
    logs.clear()
    # A tokenizer missing outside the corpus directory is trained there by rank 0.
    cfg = dataclasses.replace(cfg, tokenizer=str(tmp_path / "tok" / "sp.model"), vocab_size=400)
    ensure_default_corpus(cfg, is_main=True, barrier=lambda: calls.append(2), log=logs.append)
    assert calls == [1, 2] and Tokenizer(cfg.tokenizer).vocab_size == 400
    assert any("training a tokenizer" in line for line in logs)
    # A foreign directory at data.path is reported on every rank, before the barrier, and kept.
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "a.bin").write_bytes(random.randbytes(64))
    bad = dataclasses.replace(cfg, path=str(foreign), tokenizer=str(foreign / "tokenizer.model"))
    for is_main in (True, False):
        with pytest.raises(DataError, match="foreign"):
            ensure_default_corpus(bad, is_main=is_main, barrier=lambda: calls.append(3))
    assert calls == [1, 2] and [p.name for p in foreign.iterdir()] == ["a.bin"]


def test_ensure_builds_missing_corpus(tmp_path):
    cfg = DataConfig(
        path=str(tmp_path / "c"),
        tokenizer=str(tmp_path / "c" / "tokenizer.model"),
        vocab_size=384,
        max_corpus_mb=0.3,
        seed=3,
    )
    logs = []
    ensure_default_corpus(cfg, is_main=True, barrier=lambda: None, log=logs.append)
    assert build_tokenizer(cfg).vocab_size == 384
    assert any("preparing the embedded stdlib corpus" in line for line in logs)
    assert list((tmp_path / "c" / "tokenized").glob("*.arrow")), "rank 0 warms the token cache"


# ---------------------------------------------------------------- packing, sharding, resume


def test_packing_is_the_eos_joined_document_stream(corpus, tok, tmp_path):
    from datasets import load_from_disk

    cfg = _stdlib_cfg(corpus, tmp_path)
    expected = sorted(load_from_disk(str(corpus.dataset_dir))["heldout"]["text"])
    assert sorted(_epoch_texts(cfg, tok, "heldout")) == expected
    loader = build_loader(cfg, tok, "train", seq_len=64, micro_batch=3, rank=0, world_size=1)
    x, y = loader.next_batch()
    assert x.shape == y.shape == (3, 64)
    assert len(stream_from_rows(list(rows_of((x, y))))) == 3 * 64 + 1


def test_epochs_reshuffle_and_cover_every_document(tmp_path, tok, rng):
    docs = random_docs(rng, 12)
    cfg = _files_cfg(write_jsonl(tmp_path / "d.jsonl", docs), tok, tmp_path, heldout_fraction=0.0)
    loader = build_loader(cfg, tok, "train", seq_len=16, micro_batch=2, rank=0, world_size=1)
    rows = []
    while loader.epoch < 3:
        rows.extend(global_rows([loader], 1))
    epochs = split_docs(stream_from_rows(rows), tok.eos_id)
    orders = [tuple(tok.decode(d) for d in epochs[i * 12 : (i + 1) * 12]) for i in range(3)]
    assert all(sorted(o) == sorted(docs) for o in orders)
    assert len(set(orders)) > 1, "epochs are reshuffled"


def test_rank_sharding_matches_global_order(corpus, tok, tmp_path):
    cfg = _stdlib_cfg(corpus, tmp_path)
    ranks = [build_loader(cfg, tok, "train", 24, 2, r, 3) for r in range(3)]
    reference = global_rows([build_loader(cfg, tok, "train", 24, 6, 0, 1)], 5)
    sharded = global_rows(ranks, 5)
    assert all(torch.equal(a, b) for a, b in zip(sharded, reference, strict=True))
    assert ranks[0].state_dict() == ranks[1].state_dict() == ranks[2].state_dict()


@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2)])
def test_resume_with_a_different_world_size(corpus, tok, tmp_path, before, after):
    cfg = _stdlib_cfg(corpus, tmp_path)
    rows_per_step = 4
    reference = global_rows([build_loader(cfg, tok, "train", 20, rows_per_step, 0, 1)], 6)
    first = [build_loader(cfg, tok, "train", 20, rows_per_step // before, r, before) for r in range(before)]
    head = global_rows(first, 3)
    state = first[0].state_dict()
    second = [build_loader(cfg, tok, "train", 20, rows_per_step // after, r, after) for r in range(after)]
    for ld in second:
        ld.load_state_dict(state)
    tail = global_rows(second, 3)
    assert all(torch.equal(a, b) for a, b in zip(head + tail, reference, strict=True))


@pytest.mark.parametrize("source", ["files", "hub"])
def test_state_dict_round_trip_mid_stream(tmp_path, tok, rng, source):
    path = write_jsonl(tmp_path / "src" / "train.jsonl", random_docs(rng, 9, max_words=12))
    cfg = _files_cfg(path, tok, tmp_path, heldout_fraction=0.0)
    if source == "hub":
        cfg = dataclasses.replace(cfg, source="hub", hub_name=str(path.parent))
    loader = build_loader(cfg, tok, "train", 24, 3, 1, 2)
    for _ in range(rng.randint(2, 6)):
        loader.next_batch()
    state = json.loads(json.dumps(loader.state_dict()))  # survives serialisation
    expected = [loader.next_batch() for _ in range(12)]  # crosses epoch boundaries
    assert loader.epoch >= 1
    resumed = build_loader(cfg, tok, "train", 24, 3, 1, 2)
    resumed.load_state_dict(state)
    for want, got in zip(expected, (resumed.next_batch() for _ in range(12)), strict=True):
        assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])


def test_set_seq_len_repacks_without_loss_or_duplication(corpus, tok, tmp_path, rng):
    cfg = _stdlib_cfg(corpus, tmp_path)
    reference = stream_from_rows(global_rows([build_loader(cfg, tok, "train", 8, 1, 0, 1)], 400))
    loader = build_loader(cfg, tok, "train", 16, 2, 0, 1)
    rows = global_rows([loader], 5)
    for seq_len, micro_batch in [(40, 1), (8, 3), (rng.randint(5, 30), rng.randint(1, 3))]:
        loader.set_seq_len(seq_len, micro_batch)
        new = global_rows([loader], 4)
        assert new[0].shape == (seq_len + 1,)
        rows.extend(new)
    stream = stream_from_rows(rows)
    assert stream == reference[: len(stream)]


# ---------------------------------------------------------------- sources


@pytest.mark.parametrize("fmt", ["jsonl", "txt", "parquet", "disk", "disk_dict"])
def test_local_formats_load_every_document(tmp_path, tok, rng, fmt):
    from datasets import Dataset, DatasetDict

    docs = random_docs(rng, 40)
    if fmt == "jsonl":
        path = write_jsonl(tmp_path / "src" / "a.jsonl", docs[:25]).parent
        write_jsonl(tmp_path / "src" / "b.jsonl", docs[25:])
    elif fmt == "txt":
        path = write_txt_dir(tmp_path / "src", docs)
    elif fmt == "parquet":
        path = write_parquet(tmp_path / "src" / "d.parquet", docs)
    else:
        path = tmp_path / "src"
        ds = Dataset.from_dict({"text": docs})
        if fmt == "disk_dict":
            ds = DatasetDict({"train": ds.select(range(30)), "heldout": ds.select(range(30, 40))})
        ds.save_to_disk(str(path))
    src = tmp_path / "src"
    before = sorted((p, p.stat().st_mtime_ns) for p in src.rglob("*"))
    cfg = _files_cfg(path, tok, tmp_path, source="disk" if fmt.startswith("disk") else "files")
    train, held = _epoch_texts(cfg, tok, "train"), _epoch_texts(cfg, tok, "heldout")
    assert sorted(train + held) == sorted(docs) and not set(train) & set(held)
    if fmt == "disk_dict":
        assert sorted(held) == sorted(docs[30:])
    else:
        assert sorted(held) == sorted(d for d in docs if is_heldout(d, cfg.seed, cfg.heldout_fraction))
    after = sorted((p, p.stat().st_mtime_ns) for p in src.rglob("*"))
    assert before == after, "the user's source directory must not be written to"
    assert list((tmp_path / "cache" / "tokenized").glob("*.arrow"))


def test_token_cache_is_reused(tmp_path, tok, rng):
    cfg = _files_cfg(write_jsonl(tmp_path / "d.jsonl", random_docs(rng, 10)), tok, tmp_path)
    first = build_loader(cfg, tok, "train", 16, 2, 0, 1)
    cached = sorted((tmp_path / "cache" / "tokenized").glob("train-*.arrow"))
    stamp = [p.stat().st_mtime_ns for p in cached]
    second = build_loader(cfg, tok, "train", 16, 2, 0, 1)
    assert len(cached) == 1 and [p.stat().st_mtime_ns for p in cached] == stamp
    assert all(torch.equal(a, b) for a, b in zip(first.next_batch(), second.next_batch(), strict=True))


def test_streaming_path_on_local_files(tmp_path, tok, rng):
    docs = random_docs(rng, 30)
    write_jsonl(tmp_path / "hub" / "part0.jsonl", docs[:15])
    write_jsonl(tmp_path / "hub" / "part1.jsonl", docs[15:])
    cfg = DataConfig(
        source="hub",
        hub_name=str(tmp_path / "hub"),
        tokenizer=str(tok.path),
        heldout_fraction=0.3,
        seed=rng.randrange(1 << 30),
    )
    loader = build_loader(cfg, tok, "train", 16, 2, 0, 1)
    rows = []
    while loader.epoch == 0:
        rows.extend(global_rows([loader], 1))
    train = [tok.decode(d) for d in split_docs(stream_from_rows(rows), tok.eos_id)]
    expected = sorted(d for d in docs if not is_heldout(d, cfg.seed, cfg.heldout_fraction))
    assert sorted(train[: len(expected)]) == expected
    held = build_loader(cfg, tok, "heldout", 16, 1, 0, 1)
    assert loader.state_dict()["kind"] == "stream" and held.next_batch()[0].shape == (1, 16)


# ---------------------------------------------------------------- bad input


def test_bad_paths_and_formats(tmp_path, tok, rng):
    cases = {}
    cases["missing path"] = (_files_cfg(tmp_path / "nope" / "*.jsonl", tok, tmp_path), "nope")
    cases["unknown source"] = (dataclasses.replace(_files_cfg(tmp_path, tok, tmp_path), source="s3"), "s3")
    (tmp_path / "bin.txt").write_bytes(random.randbytes(200) + b"\x00" + random.randbytes(50))
    cases["binary"] = (_files_cfg(tmp_path / "bin.txt", tok, tmp_path), "binary")
    (tmp_path / "latin.txt").write_bytes(("café " * 20).encode("latin-1"))
    cases["non-utf8"] = (_files_cfg(tmp_path / "latin.txt", tok, tmp_path), "not UTF-8")
    write_jsonl(tmp_path / "col" / "d.jsonl", random_docs(rng, 4), field="body")
    cases["no text column"] = (
        _files_cfg(tmp_path / "col", tok, tmp_path),
        "columns found: \\['body', 'id'\\]",
    )
    write_jsonl(tmp_path / "empty" / "d.jsonl", ["", "   ", "\n"])
    cases["empty text"] = (_files_cfg(tmp_path / "empty", tok, tmp_path), "no documents")
    (tmp_path / "zero").mkdir()
    (tmp_path / "zero" / "a.jsonl").write_bytes(b"")
    cases["zero-byte file"] = (_files_cfg(tmp_path / "zero", tok, tmp_path), "is empty")
    (tmp_path / "mixed").mkdir()
    write_jsonl(tmp_path / "mixed" / "a.jsonl", ["x"])
    (tmp_path / "mixed" / "b.txt").write_text("y")
    cases["mixed formats"] = (_files_cfg(tmp_path / "mixed", tok, tmp_path), "mixes formats")
    (tmp_path / "d.csv").write_text("text\nhello\n")
    cases["extension"] = (_files_cfg(tmp_path / "d.csv", tok, tmp_path), "unsupported extension")
    (tmp_path / "notdisk").mkdir()
    cases["not save_to_disk"] = (
        _files_cfg(tmp_path / "notdisk", tok, tmp_path, source="disk"),
        "save_to_disk",
    )
    cases["bad split"] = (
        _files_cfg(write_jsonl(tmp_path / "ok.jsonl", ["a b"]), tok, tmp_path),
        "'dev' not found",
    )
    cases["empty hub name"] = (DataConfig(source="hub", tokenizer=str(tok.path)), "hub_name")
    for name, (cfg, pattern) in cases.items():
        split = "dev" if name == "bad split" else "train"
        with pytest.raises(DataError, match=pattern):
            build_loader(cfg, tok, split, 16, 1, 0, 1)
            pytest.fail(f"{name}: no error")
    with pytest.raises(DataError, match="unknown"):
        ensure_default_corpus(cases["unknown source"][0], True, lambda: None)
    with pytest.raises(DataError, match="nope"):
        ensure_default_corpus(cases["missing path"][0], True, lambda: None)


def test_bad_tokenizers(tmp_path, tok):
    with pytest.raises(DataError, match="does not exist"):
        build_tokenizer(DataConfig(tokenizer=str(tmp_path / "missing.model")))
    corrupt = tmp_path / "corrupt.model"
    corrupt.write_bytes(random.randbytes(300))
    with pytest.raises(DataError, match="corrupt.model"):
        build_tokenizer(DataConfig(tokenizer=str(corrupt)))
    with pytest.raises(ConfigError) as info:
        check_vocab(tok, tok.vocab_size - random.randint(1, 100))
    assert info.value.key == "model.vocab_size" and "512" in str(info.value)
    check_vocab(tok, tok.vocab_size + random.randint(0, 100))


def test_bad_loader_state_and_shapes(corpus, tok, tmp_path, rng):
    cfg = _stdlib_cfg(corpus, tmp_path)
    loader = build_loader(cfg, tok, "train", 16, 2, 0, 1)
    other = build_loader(cfg, tok, "heldout", 16, 2, 0, 1)
    with pytest.raises(DataError, match="data changed"):
        other.load_state_dict(loader.state_dict())
    with pytest.raises(DataError, match="lacks"):
        loader.load_state_dict({"epoch": rng.randint(0, 5)})
    with pytest.raises(DataError, match="seq_len"):
        loader.set_seq_len(0, 2)
    with pytest.raises(DataError, match="rank"):
        build_loader(cfg, tok, "train", 16, 2, 2, 2)


def test_prepare_data_script(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "prepare_data.py"
    spec = importlib.util.spec_from_file_location("prepare_data", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "c"
    args = ["--out", str(out), "--vocab-size", "400", "--max-corpus-mb", "0.2", "--seed", "5"]
    assert module.main(args) == 0
    assert Tokenizer(out / "tokenizer.model").vocab_size == 400
    assert "tokenizer:" in capsys.readouterr().out
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x.txt").write_text(random_text(random.Random()))
    assert module.main(["--out", str(tmp_path / "taken")]) == 1
    assert "taken" in capsys.readouterr().err
