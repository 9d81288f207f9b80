"""Bad inputs, table-driven: each gets a clear error naming its cause, and nothing on disk is lost.

One row per bad input, through the public entry point a user reaches it by:

- config: Hydra composition + `config.validate` (what `flamia-train` runs first);
- data / tokenizer: `data.ensure_default_corpus` -> `build_tokenizer` -> `check_vocab` ->
  `build_loader(...).next_batch()` (what `build.build_run` runs);
- checkpoint: the CLI body in-process with `resume=PATH` (exit code 2, message on stderr);
- kernel: `flamia_kernels.flamia_attention`.

Before each row every file under the row's directory and the shared corpus is hashed; after
the error every one of them must still be there, unchanged. The decided non-errors (NaN inputs
to the kernel, a checkpoint from another precision recipe, non-contiguous kernel inputs) are
tested at the end, with the reason for each decision.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import reliability_runs as runs
import torch
from flamia_kernels import flamia_attention
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError
from reliability_report import record

from flamia_train import data
from flamia_train.config import to_dataclass, validate
from flamia_train.errors import ConfigError, DataError


@dataclass
class Bad:
    area: str
    name: str
    setup: Callable[[Path], list[str] | Callable]  # -> overrides (config/data/checkpoint) or a call (kernel)
    needle: str  # the message must contain it
    error: type | tuple = Exception


COMPOSE_ERRORS = (ConfigCompositionException, ConfigKeyError, ValidationError)


def _cfg(*extra):
    return lambda tmp: list(extra)


def _file(name: str, payload: bytes, *extra: str):
    def setup(tmp: Path) -> list[str]:
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_bytes(payload)
        return ["data=files", f"data.path={tmp / name}", *extra]
    return setup


def _dir_with(files: dict[str, bytes], *extra: str):
    def setup(tmp: Path) -> list[str]:
        for name, payload in files.items():
            (tmp / "d" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / "d" / name).write_bytes(payload)
        return [f"data.path={tmp / 'd'}", *extra]
    return setup


def _tokenizer(payload: bytes | None):
    def setup(tmp: Path) -> list[str]:
        if payload is not None:
            (tmp / "tok.model").write_bytes(payload)
        (tmp / "docs.jsonl").write_bytes(JSONL)  # data=files: stdlib would build a missing tokenizer
        return ["data=files", f"data.path={tmp / 'docs.jsonl'}", f"data.tokenizer={tmp / 'tok.model'}"]
    return setup


JSONL = b'{"text": "def f():\\n    return 1\\n"}\n'
CONFIG = [
    Bad("config", "negative learning rate", _cfg("train.lr=-1"), "train.lr", ConfigError),
    Bad("config", "seq_len not a multiple of the block", _cfg("train.seq_len=100"), "train.seq_len", ConfigError),
    Bad("config", "kv heads not dividing heads", _cfg("model.n_kv_heads=3"), "model.n_kv_heads", ConfigError),
    Bad("config", "tokens_per_step not a multiple", _cfg("train.tokens_per_step=1000"), "train.tokens_per_step",
        ConfigError),
    Bad("config", "warm-up longer than the run", _cfg("train.steps=5", "schedule.warmup_steps=9"),
        "schedule.warmup_steps", ConfigError),
    Bad("config", "held-out fraction above 1", _cfg("data.heldout_fraction=1.5"), "data.heldout_fraction",
        ConfigError),
    Bad("config", "resume path that does not exist", _cfg("resume=/nonexistent/step_00000001"), "resume",
        ConfigError),
    Bad("config", "run_dir below a file", lambda t: (t / "f").write_text("x") and [f"run_dir={t / 'f' / 'run'}"],
        "run_dir", ConfigError),
    Bad("config", "negative spike sigma", _cfg("train.spike_sigma=-1"), "train.spike_sigma", ConfigError),
    Bad("config", "zero max_bad_steps", _cfg("train.max_bad_steps=0"), "train.max_bad_steps", ConfigError),
    Bad("config", "malformed inject_fault", _cfg("train.inject_fault=zap@3"), "train.inject_fault", ConfigError),
    Bad("config", "unknown attention format", _cfg("precision.default.attention=fp7"), "fp7", (ConfigError,
                                                                                                ValueError)),
    Bad("config", "head_dim unsupported by a quantized format",
        _cfg("precision=fp8", "model.d_model=192", "model.n_heads=2", "model.n_kv_heads=2"), "head_dim",
        (ConfigError, ValueError)),
    Bad("config", "keep zero checkpoints", _cfg("checkpoint.keep=0"), "checkpoint.keep", ConfigError),
    Bad("config", "unknown logger mode", _cfg("logger.mode=loud"), "logger.mode", ConfigError),
    Bad("config", "unknown activation checkpointing", _cfg("parallel.activation_checkpoint=some"),
        "parallel.activation_checkpoint", ConfigError),
    Bad("config", "misspelt key", _cfg("train.stpes=3"), "stpes", COMPOSE_ERRORS),
    Bad("config", "wrong type", _cfg("train.steps=many"), "many", COMPOSE_ERRORS),
    Bad("config", "unknown model preset", _cfg("model=gpt-7t"), "gpt-7t", COMPOSE_ERRORS),
]
DATA = [
    Bad("data", "missing path", lambda t: ["data=files", f"data.path={t}/nothing/*.jsonl"], "matches no files",
        DataError),
    Bad("data", "empty file", _file("empty.jsonl", b""), "empty", DataError),
    Bad("data", "binary file", _file("blob.txt", b"\x7fELF\x02\x01\x00\x00" * 64), "looks binary", DataError),
    Bad("data", "non-UTF-8 text", _file("latin1.txt", "café naïve\n".encode("latin-1") * 8), "UTF-8", DataError),
    Bad("data", "jsonl without the text column", _file("col.jsonl", b'{"body": "x"}\n'), "is not a column",
        DataError),
    Bad("data", "text column of numbers", _file("num.jsonl", b'{"text": 5}\n'), "not text", DataError),
    Bad("data", "malformed JSON line", _file("bad.jsonl", JSONL + b"{not json\n"), "JSON parse error", DataError),
    Bad("data", "unsupported extension", _file("data.csv", b"text\nhello\n"), "unsupported extension",
        DataError),
    Bad("data", "corrupt parquet", _file("data.parquet", b"PAR1 this is not parquet"), "parquet", DataError),
    Bad("data", "directory of mixed formats", _dir_with({"a.jsonl": JSONL, "b.txt": b"hello"}, "data=files"),
        "mixes formats", DataError),
    Bad("data", "stdlib path holding other files", _dir_with({"mine.txt": b"keep me"}),
        "not a prepared stdlib corpus", DataError),
    Bad("data", "disk path not written by save_to_disk", _dir_with({"x.arrow": b"x"}, "data=disk"),
        "save_to_disk", DataError),
    Bad("tokenizer", "missing tokenizer file", _tokenizer(None), "does not exist", DataError),
    Bad("tokenizer", "corrupt tokenizer file", _tokenizer(b"\x00\x01garbage" * 100), "not a valid sentencepiece",
        DataError),
    Bad("tokenizer", "empty tokenizer file", _tokenizer(b""), "tok.model", DataError),
    Bad("tokenizer", "tokenizer larger than the model vocab", _cfg("model.vocab_size=256"), "model.vocab_size",
        ConfigError),
]


def _ckpt(damage: Callable[[Path], None], *extra: str):
    def setup(tmp: Path) -> list[str]:
        step = tmp / "ckpt" / "step_00000002"
        shutil.copytree(BASE_CHECKPOINT, step)
        damage(step)
        return [f"resume={step}", *extra]
    return setup


def _truncate(name: str):
    def damage(step: Path) -> None:
        with open(step / name, "r+b") as fh:
            fh.truncate(fh.seek(0, 2) // 2)
    return damage


def _meta(**changes):
    def damage(step: Path) -> None:
        meta = json.loads((step / "meta.json").read_text())
        (step / "meta.json").write_text(json.dumps({**meta, **changes}))
    return damage


CHECKPOINT = [
    Bad("checkpoint", "truncated shard", _ckpt(_truncate("__0_0.distcp")), "truncated"),
    Bad("checkpoint", "missing DCP .metadata", _ckpt(lambda s: (s / ".metadata").unlink()), "no DCP .metadata"),
    Bad("checkpoint", "meta.json not JSON", _ckpt(lambda s: (s / "meta.json").write_text("{nope")),
        "unreadable meta.json"),
    Bad("checkpoint", "from a future format version", _ckpt(_meta(format_version=99)), "newer than this code"),
    Bad("checkpoint", "wrong model shape", _ckpt(lambda s: None, "model.d_model=64", "model.n_heads=1",
                                                 "model.n_kv_heads=1"), "d_model"),
    Bad("checkpoint", "missing rank file", _ckpt(lambda s: (s / "rank_0.pt").unlink()), "missing file rank_0.pt"),
    Bad("checkpoint", "garbage app_state.pt", _ckpt(lambda s: (s / "app_state.pt").write_bytes(b"x" * 64)),
        "unreadable app_state.pt"),
    Bad("checkpoint", "a directory that is no checkpoint", _ckpt(lambda s: [p.unlink() for p in s.iterdir()]),
        "no DCP .metadata"),
]


def _qkv(b=1, hq=2, hkv=2, s=128, d=64, dtype=torch.bfloat16):
    return (torch.randn(b, hq, s, d, dtype=dtype), torch.randn(b, hkv, s, d, dtype=dtype),
            torch.randn(b, hkv, s, d, dtype=dtype))


def _attn(spec="fp8", **shape):
    return lambda tmp: (lambda: flamia_attention(*_qkv(**shape), spec))


KERNEL = [
    Bad("kernel", "fp32 operands for a quantized spec", _attn(dtype=torch.float32), "dtype", TypeError),
    Bad("kernel", "k on another device", lambda t: lambda: flamia_attention(
        *((x if i != 1 else x.to("meta")) for i, x in enumerate(_qkv())), "fp8"), "is on", ValueError),
    Bad("kernel", "rank-3 tensors", lambda t: lambda: flamia_attention(*(x[0] for x in _qkv()), "fp8"), "rank 4",
        ValueError),
    Bad("kernel", "head_dim 96 for fp8", _attn(d=96), "head_dim 96", ValueError),
    Bad("kernel", "S not a multiple of SEQ_BLOCK", _attn(s=100), "SEQ_BLOCK", ValueError),
    Bad("kernel", "GQA heads not dividing", _attn(hq=3, hkv=2), "must divide", ValueError),
    Bad("kernel", "unknown spec", _attn(spec="fp9"), "fp9", ValueError),
    Bad("kernel", "v shaped unlike k", lambda t: lambda: flamia_attention(*_qkv()[:2], torch.randn(1, 2, 128, 32,
                                                                        dtype=torch.bfloat16), "bf16"),
        "must equal k shape", ValueError),
    Bad("kernel", "a list instead of a tensor", lambda t: lambda: flamia_attention([1.0], *_qkv()[1:], "fp8"),
        "torch.Tensor", TypeError),
]
TABLE = CONFIG + DATA + CHECKPOINT + KERNEL
BASE_CHECKPOINT: Path = Path()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The shared corpus, and one real checkpoint (2 steps) the checkpoint rows damage copies of."""
    global BASE_CHECKPOINT
    corpus = runs.small_corpus(tmp_path_factory)
    base = tmp_path_factory.mktemp("base") / "run"
    assert runs.run_inprocess(base, corpus, "train.steps=2", "checkpoint.interval=0",
                              "checkpoint.export_safetensors=false") == 0
    BASE_CHECKPOINT = base / "checkpoints" / "step_00000002"
    return corpus


def _data_pipeline(cfg) -> None:
    data.ensure_default_corpus(cfg.data, True, lambda: None, log=lambda *a: None)
    tok = data.build_tokenizer(cfg.data)
    data.check_vocab(tok, cfg.model.vocab_size)
    data.build_loader(cfg.data, tok, cfg.data.split, cfg.train.seq_len, 2, 0, 1).next_batch()


def _message(row: Bad, made, tmp: Path, corpus: Path, capsys) -> str:
    """Run the row (set up as `made`) through its entry point; the error message it produced."""
    if row.area == "kernel":
        with pytest.raises(row.error) as info:
            made()
        return str(info.value)
    if row.area == "checkpoint":
        code = runs.run_inprocess(tmp / "run", corpus, "train.steps=3", *made)
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err, err
        return err
    args = runs.overrides(tmp / "run", corpus, f"data.cache_dir={tmp / 'cache'}", *made)
    with pytest.raises(row.error) as info:
        cfg = to_dataclass(runs.compose(*args))
        validate(cfg)
        _data_pipeline(cfg)
    return str(info.value)


def _digest(tmp: Path, corpus: Path) -> dict[str, str]:
    return {**{f"corpus/{k}": v for k, v in runs.tree_digest(corpus).items()},
            **{f"case/{k}": v for k, v in runs.tree_digest(tmp).items()}}


@pytest.mark.parametrize("row", TABLE, ids=[f"{r.area}: {r.name}" for r in TABLE])
def test_bad_input_gets_a_clear_error_and_deletes_nothing(row, tmp_path, corpus, capsys):
    made = row.setup(tmp_path)
    before = _digest(tmp_path, corpus)  # the user's files, the bad one included
    message = _message(row, made, tmp_path, corpus, capsys)
    record("bad inputs", row.area)
    assert row.needle in message, message
    after = _digest(tmp_path, corpus)
    assert {k: v for k, v in before.items() if after.get(k) != v} == {}, "a file was deleted or changed"


def test_the_table_has_at_least_30_rows():
    assert len(TABLE) >= 30 and {r.area for r in TABLE} == {"config", "data", "tokenizer", "checkpoint", "kernel"}


def test_cli_reports_a_bad_data_file_without_a_traceback(tmp_path, corpus):
    (tmp_path / "blob.txt").write_bytes(b"\x00" * 512)
    proc = runs.run_cli(tmp_path / "run", corpus, "data=files", f"data.path={tmp_path / 'blob.txt'}", check=False)
    record("bad inputs", "data (CLI)")
    assert proc.returncode == 2 and "looks binary" in proc.stderr and "Traceback" not in proc.stderr
    assert (tmp_path / "blob.txt").read_bytes() == b"\x00" * 512


# ---------------------------------------------------------------- decided non-errors


@pytest.mark.parametrize("operand", ["q", "k", "v"])
@pytest.mark.parametrize("spec", ["bf16", "fp8"])
def test_nan_inputs_surface_as_nan_never_as_finite_garbage(operand, spec):
    """Decision: the kernel does not scan its inputs for NaN (a device sync and a full read of Q, K, V
    per call); a NaN input yields NaN outputs, the loss goes non-finite and the guard skips the
    step (tests/test_guard.py). A NaN in q or k reaches only rows at or after it; a NaN in v also
    reaches earlier rows (0 x NaN in P.V), which is harmless since the whole step is skipped."""
    q, k, v = _qkv(s=256)
    poisoned = {"q": q, "k": k, "v": v}
    poisoned[operand] = poisoned[operand].clone()
    poisoned[operand][:, :, 200] = float("nan")
    out = flamia_attention(poisoned["q"], poisoned["k"], poisoned["v"], spec)
    record("bad inputs", "kernel NaN (propagates by decision)")
    nan_rows = torch.isnan(out).any(-1).any(1)[0]
    assert nan_rows[200] and (operand == "q" or nan_rows[200:].all())  # a query's NaN is its own row's
    if operand != "v":
        assert not nan_rows[:200].any()


def test_non_contiguous_kernel_inputs_are_accepted_and_exact():
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in _qkv())  # same values, other strides
    assert not q.is_contiguous()
    assert torch.equal(flamia_attention(q, k, v, "bf16"), flamia_attention(q.contiguous(), k.contiguous(),
                                                                             v.contiguous(), "bf16"))


def test_checkpoint_from_another_recipe_loads_with_a_warning(tmp_path, corpus, capsys):
    """Decision: warn, not refuse: weights and optimizer state are full precision under every recipe,
    and switching recipe on resume (bf16 warm-up then fp8, or back to bf16) is a legitimate move."""
    step = tmp_path / "ckpt" / "step_00000002"
    shutil.copytree(BASE_CHECKPOINT, step)
    with pytest.warns(UserWarning, match="trained with precision recipe 'bf16', this run uses 'fp8'"):
        code = runs.run_inprocess(tmp_path / "run", corpus, "train.steps=2", "precision=fp8", f"resume={step}",
                                  "checkpoint.export_safetensors=false")
    record("bad inputs", "checkpoint (other recipe: warning by decision)")
    assert code == 0, capsys.readouterr().err
