"""CPU smoke tier: the `flamia-train` command end to end, as a user runs it (subprocesses).

Covers issue 2's acceptance: the tiny model learns on the embedded corpus, resume is
bit-exact (1 process and 2-process FSDP2), 1 and 2 processes follow the same loss curve on
the same global batch, and bad inputs fail with a clear error and touch nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from flamia_train.data import prepare_default_corpus

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """A small slice of the embedded corpus with a 512-token tokenizer, built once."""
    out = tmp_path_factory.mktemp("corpus") / "stdlib"
    prepare_default_corpus(out, vocab_size=512, max_corpus_mb=1.5, seed=0)
    return out


def cli(run_dir: Path, corpus: Path, *overrides: str, nproc: int = 1, timeout: int = 600,
        check: bool = True) -> subprocess.CompletedProcess:
    """Run flamia-train (or torchrun with it) on the tiny model with CPU-friendly settings."""
    base = [
        f"run_dir={run_dir}", f"data.path={corpus}", f"data.tokenizer={corpus}/tokenizer.model",
        "logger=none", "logger.log_interval=1", "train.seq_len=128", "train.micro_batch_size=4",
        "train.eval_batches=2", "parallel.param_dtype=fp32", "schedule.warmup_steps=1",
    ]
    if nproc == 1:  # the console script, as the README runs it
        cmd = [str(Path(sys.executable).with_name("flamia-train"))]
    else:
        cmd = [TORCHRUN, "--standalone", f"--nproc_per_node={nproc}", "-m", "flamia_train.train"]
    env = {**os.environ, "OMP_NUM_THREADS": "1" if nproc > 1 else "2", "PYTHONUNBUFFERED": "1"}
    env.pop("TRITON_INTERPRET", None)  # bf16 attention runs SDPA; nothing to interpret
    # Run outside the checkout: configs must be found from the installed package, not the cwd.
    proc = subprocess.run(cmd + base + list(overrides), cwd=run_dir.parent, env=env, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}")
    return proc


def eval_losses(stdout: str) -> dict[int, float]:
    return {int(s): float(v) for s, v in re.findall(r"eval step=(\d+) heldout_loss=([\d.]+)", stdout)}


def train_losses(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if "loss" in r]


def exported(run_dir: Path) -> dict[str, torch.Tensor]:
    (path,) = sorted((run_dir / "export").glob("*.safetensors"))[-1:]
    return load_file(path)


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs"


def test_tiny_model_learns_on_embedded_corpus(tmp_path, corpus):
    proc = cli(tmp_path / "run", corpus, "train.steps=200", "train.eval_interval=100", "train.lr=3e-3",
               "checkpoint.interval=0", "schedule.warmup_steps=20")
    losses = eval_losses(proc.stdout)
    assert set(losses) >= {0, 200}
    assert losses[200] < losses[0] - 1.5, losses  # a clear margin, not just "lower"
    final = proc.stdout.strip().splitlines()[-1]
    assert re.match(r"final step=200 heldout_loss=[\d.]+ tokens_per_s=\d+", final), final


def _resume_case(tmp_path: Path, corpus: Path, nproc: int) -> None:
    steps = ["train.steps=6", "checkpoint.keep=5", "train.eval_interval=0", "schedule.warmup_steps=2"]
    full = tmp_path / "full"
    cli(full, corpus, *steps, "checkpoint.interval=3", nproc=nproc)
    step3 = full / "checkpoints" / "step_00000003"
    assert step3.is_dir()
    resumed = tmp_path / "resumed"
    proc = cli(resumed, corpus, *steps, "checkpoint.interval=0", f"resume={step3}", nproc=nproc)
    assert "resumed from" in proc.stderr
    assert_same_weights(exported(full), exported(resumed))
    assert train_losses(full)[3:] == train_losses(resumed)


def test_resume_is_bit_exact_single_process(tmp_path, corpus):
    _resume_case(tmp_path, corpus, nproc=1)


@pytest.mark.distributed
def test_resume_is_bit_exact_fsdp2_two_processes(tmp_path, corpus):
    _resume_case(tmp_path, corpus, nproc=2)


@pytest.mark.distributed
def test_one_and_two_processes_follow_the_same_loss_curve(tmp_path, corpus):
    common = ["train.steps=5", "train.eval_interval=0", "checkpoint.interval=0", "train.tokens_per_step=1024",
              "checkpoint.export_safetensors=false"]
    cli(tmp_path / "one", corpus, *common, nproc=1)
    cli(tmp_path / "two", corpus, *common, nproc=2)
    one, two = train_losses(tmp_path / "one"), train_losses(tmp_path / "two")
    assert len(one) == len(two) == 5
    assert one == pytest.approx(two, rel=1e-4, abs=1e-5)


def test_resume_auto_continues_and_keeps_user_files(tmp_path, corpus):
    run = tmp_path / "run"
    cli(run, corpus, "train.steps=4", "checkpoint.interval=2", "train.eval_interval=0")
    note = run / "checkpoints" / "my_notes.txt"
    note.write_text("mine")
    proc = cli(run, corpus, "train.steps=6", "checkpoint.interval=2", "train.eval_interval=0")
    assert "resumed from" in proc.stderr and "step_00000004" in proc.stderr
    assert note.read_text() == "mine"


def test_corrupt_checkpoint_is_skipped_with_a_warning_and_kept(tmp_path, corpus):
    run = tmp_path / "run"
    cli(run, corpus, "train.steps=4", "checkpoint.interval=2", "train.eval_interval=0", "checkpoint.keep=5")
    newest = run / "checkpoints" / "step_00000004"
    (newest / "meta.json").write_text("{not json")
    proc = cli(run, corpus, "train.steps=5", "checkpoint.interval=0", "train.eval_interval=0")
    assert "step_00000004" in proc.stderr and "resumed from" in proc.stderr and "step_00000002" in proc.stderr
    assert (newest / "meta.json").read_text() == "{not json"


def test_checkpoint_from_a_different_model_shape_is_refused(tmp_path, corpus):
    run = tmp_path / "run"
    cli(run, corpus, "train.steps=2", "checkpoint.interval=2", "train.eval_interval=0")
    proc = cli(run, corpus, "train.steps=4", "model.d_model=512", "model.n_heads=8", check=False)
    assert proc.returncode != 0
    assert "d_model" in proc.stderr
    assert (run / "checkpoints" / "step_00000002").is_dir()


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["model=gpt-7t"], "gpt-7t"),
        (["train.lr=-1"], "train.lr"),
        (["train.seq_len=100"], "train.seq_len"),
        (["model.vocab_size=256"], "model.vocab_size"),
    ],
)
def test_bad_input_exits_nonzero_with_the_error_on_stderr(tmp_path, corpus, overrides, needle):
    proc = cli(tmp_path / "run", corpus, "train.steps=2", *overrides, check=False)
    assert proc.returncode != 0
    assert needle in proc.stderr


def test_missing_and_empty_data_are_clear_errors(tmp_path, corpus):
    proc = cli(tmp_path / "run", corpus, "data=files", f"data.path={tmp_path}/nothing/*.jsonl", check=False)
    assert proc.returncode != 0 and "nothing" in proc.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    proc = cli(tmp_path / "run2", corpus, "data=files", f"data.path={empty}", check=False)
    assert proc.returncode != 0 and "empty" in proc.stderr.lower()
    assert empty.exists()


def test_first_run_prepares_the_default_corpus_when_missing(tmp_path, corpus):
    """The README's train command needs nothing run before it: data and tokenizer are built on demand."""
    fresh = tmp_path / "data" / "stdlib"
    proc = cli(tmp_path / "run", fresh, "train.steps=2", "train.eval_interval=0", "data.vocab_size=512",
               "data.max_corpus_mb=0.5")
    assert (fresh / "tokenizer.model").exists()
    assert "final step=2" in proc.stdout
