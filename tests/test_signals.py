"""SIGTERM / SIGUSR1: the run finishes its step, writes a checkpoint and exits 0; all ranks agree.

The 2-process case signals rank 1 only: rank 0 never sees the signal, yet both ranks must
stop after the same step (all_reduce_max of the flag), or one would wait forever in a
collective the other never enters.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
import reliability_runs as runs
from reliability_report import record

from flamia_train.signals import StopSignals

LONG = ["train.steps=500", "checkpoint.interval=0", "checkpoint.export_safetensors=false"]


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    return runs.small_corpus(tmp_path_factory)


def test_handler_sets_the_flag_and_uninstall_restores_the_previous_handler():
    before = signal.getsignal(signal.SIGUSR1)
    stop = StopSignals().install()
    try:
        assert not stop.requested()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.requested() and stop.describe() == "SIGUSR1"
    finally:
        stop.uninstall()
    assert signal.getsignal(signal.SIGUSR1) == before


def _wait_for_step(proc, run_dir: Path, step: int, timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    metrics = run_dir / "metrics.jsonl"
    while time.monotonic() < end:
        if metrics.exists() and re.search(rf'"step": {step}\b', metrics.read_text()):
            return
        assert proc.poll() is None, Path(proc.log).read_text()[-3000:]
        time.sleep(0.01)
    raise AssertionError(f"no step {step} within {timeout} s")


def _stopped_cleanly(proc, run_dir: Path, sig_name: str) -> int:
    """Exit 0, the message, and a checkpoint at the step it stopped at (< the run's 500); returns that step."""
    assert proc.wait(timeout=300) == 0, Path(proc.log).read_text()[-3000:]
    log = Path(proc.log).read_text()
    assert f"received {sig_name}: stopping after step" in log, log[-3000:]
    (last,) = runs.step_dirs(run_dir)
    step = json.loads((last / "meta.json").read_text())["step"]
    assert 2 <= step < 500 and f"stopping after step {step} " in log
    return step


def test_sigterm_checkpoints_and_exits_zero_then_resumes(tmp_path, corpus):
    run = tmp_path / "run"
    proc = runs.start(run, corpus, *LONG)
    _wait_for_step(proc, run, 2)
    os.kill(proc.pid, signal.SIGTERM)
    record("injected faults", "SIGTERM")
    step = _stopped_cleanly(proc, run, "SIGTERM")
    done = runs.run_cli(run, corpus, f"train.steps={step + 1}", "checkpoint.interval=0",
                        "checkpoint.export_safetensors=false")
    assert f"resumed from {run / 'checkpoints' / f'step_{step:08d}'} at step {step}" in done.stderr
    assert f"final step={step + 1}" in done.stdout


def _rank_pids(torchrun_pid: int) -> dict[int, int]:
    """{rank: pid} of torchrun's worker processes, from their environment."""
    children = Path(f"/proc/{torchrun_pid}/task/{torchrun_pid}/children").read_text().split()
    ranks = {}
    for pid in map(int, children):
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        rank = next((int(e[5:]) for e in env if e.startswith(b"RANK=")), None)
        if rank is not None:
            ranks[rank] = pid
    return ranks


@pytest.mark.distributed
def test_sigusr1_to_one_rank_stops_both_at_the_same_step(tmp_path, corpus):
    run = tmp_path / "run"
    proc = runs.start(run, corpus, *LONG, nproc=2)
    _wait_for_step(proc, run, 2)
    os.kill(_rank_pids(proc.pid)[1], signal.SIGUSR1)  # rank 1 only
    record("injected faults", "SIGUSR1 to one of 2 ranks")
    _stopped_cleanly(proc, run, "a stop signal (on another rank)")
    (last,) = runs.step_dirs(run)
    assert json.loads((last / "meta.json").read_text())["world_size"] == 2
