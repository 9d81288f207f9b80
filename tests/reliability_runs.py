"""Helpers for the reliability tests: a small corpus, small runs of `flamia-train` and what they leave.

Runs come in two kinds:

- `run_inprocess(...)`: the CLI's own body (`train.main.__wrapped__`, i.e. without Hydra's
  argv parsing) on a composed config, in this process. Seconds faster than a subprocess and
  lets a test monkeypatch a fault into the save path. Returns the exit code.
- `start(...)` / `run_cli(...)`: `python -m flamia_train.train` or torchrun as subprocesses,
  for what needs a real process: SIGKILL, signals, several ranks.

Both use `SMALL`, a 2-layer model that trains a step in well under a second on a CPU core.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
SMALL = [
    "logger=none", "logger.log_interval=1", "model.vocab_size=512", "model.d_model=128", "model.n_layers=2",
    "model.n_heads=2", "model.n_kv_heads=2", "train.seq_len=128", "train.micro_batch_size=2",
    "train.eval_batches=1", "train.eval_interval=0", "parallel.param_dtype=fp32", "schedule.warmup_steps=1",
]


def small_corpus(tmp_path_factory) -> Path:
    """The embedded corpus, 0.5 MB with a 512-token tokenizer, built once per session."""
    from flamia_train.data import prepare_default_corpus

    out = tmp_path_factory.getbasetemp() / "reliability_corpus"
    if not (out / "tokenizer.model").exists():
        prepare_default_corpus(out, vocab_size=512, max_corpus_mb=0.5, seed=0, log=lambda *a: None)
    return out


def overrides(run_dir: Path, corpus: Path, *extra: str) -> list[str]:
    return [f"run_dir={run_dir}", f"data.path={corpus}", f"data.tokenizer={corpus}/tokenizer.model", *SMALL,
            *extra]


def compose(*args: str):
    """The DictConfig `flamia-train ARGS...` would run with."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from flamia_train.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=list(args))


def run_inprocess(run_dir: Path, corpus: Path, *extra: str) -> int:
    """Exit code of the CLI body run in this process (0, or what it passes to sys.exit)."""
    from flamia_train.train import main

    try:
        main.__wrapped__(compose(*overrides(run_dir, corpus, *extra)))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def _command(nproc: int) -> list[str]:
    if nproc == 1:
        return [sys.executable, "-m", "flamia_train.train"]
    return [TORCHRUN, "--standalone", f"--nproc_per_node={nproc}", "-m", "flamia_train.train"]


def _env(nproc: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("TRITON_INTERPRET", None)  # bf16 attention runs SDPA: nothing to interpret
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def start(run_dir: Path, corpus: Path, *extra: str, nproc: int = 1, log: Path | None = None) -> subprocess.Popen:
    """Start a run in the background; stdout+stderr go to `log` (default run_dir.log)."""
    log = log or run_dir.with_suffix(".log")
    out = open(log, "ab")  # noqa: SIM115 - the child owns it; closed when this process closes the handle
    proc = subprocess.Popen(_command(nproc) + overrides(run_dir, corpus, *extra), cwd=ROOT, env=_env(nproc),
                            stdout=out, stderr=subprocess.STDOUT)
    out.close()
    proc.log = log
    return proc


def run_cli(run_dir: Path, corpus: Path, *extra: str, nproc: int = 1, check: bool = True,
            timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(_command(nproc) + overrides(run_dir, corpus, *extra), cwd=ROOT, env=_env(nproc),
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}")
    return proc


# ---------------------------------------------------------------- what a run leaves


def metric_rows(run_dir: Path) -> list[dict]:
    """Training rows of run_dir/metrics.jsonl in order; lines a kill cut short are left out."""
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "loss" in row:
            rows.append(row)
    return rows


def metrics(run_dir: Path) -> dict[int, dict]:
    """Training rows by step; a step logged twice (re-run after a resume) keeps its last row."""
    return {r["step"]: r for r in metric_rows(run_dir)}


def step_dirs(run_dir: Path) -> list[Path]:
    """Complete checkpoint directories (final names), oldest first."""
    root = run_dir / "checkpoints"
    return sorted(p for p in root.glob("step_*") if p.is_dir() and ".tmp-" not in p.name) if root.is_dir() else []


def app_state(step_dir: Path) -> dict:
    return torch.load(step_dir / "app_state.pt", weights_only=False)


def exported_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(sorted((run_dir / "export").glob("*.safetensors"))[-1])


def tree_digest(root: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under `root` (directories as 'dir'): a before/after snapshot."""
    root = Path(root)
    if root.is_file():
        return {root.name: hashlib.sha256(root.read_bytes()).hexdigest()}
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out
