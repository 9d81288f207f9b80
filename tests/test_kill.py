"""Kill test: SIGKILL a CPU training run at random moments; every time, the newest checkpoint loads.

A campaign runs `flamia-train` with a checkpoint every step and kills it again and again,
each time at one of three kinds of moment (chosen by a seeded RNG, FLAMIA_KILL_SEED):

- "start-up": a random delay after launch, usually before the first new step (imports,
  data, the checkpoint load itself);
- "mid-training": once the run has logged a chosen step, after a random extra delay;
- "checkpoint write": the instant a new `step_*.tmp-*` directory appears (a save in flight).

After each kill: every final-named checkpoint validates (atomic rename, atomic pruning), and
the next launch (resume=auto) says it resumed from the newest one, so that one loaded. At the
end the run finishes and its weights and every logged loss equal those of an uninterrupted
run: the kills cost time, never correctness. The default tier does 3 kills (one of each kind);
`--runslow` does 21.
"""

from __future__ import annotations

import os
import random
import re
import signal
import time
from pathlib import Path

import pytest
import reliability_runs as runs
import torch
from reliability_report import record

from flamia_train.checkpoint import validate_checkpoint

SEED = int(os.environ.get("FLAMIA_KILL_SEED", "7"))
MODES = ("start-up", "mid-training", "checkpoint write")
POLL_S = 0.002


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    return runs.small_corpus(tmp_path_factory)


def _common(steps: int) -> list[str]:
    return [f"train.steps={steps}", "checkpoint.interval=1", "checkpoint.keep=3"]


def _logged_step(run_dir: Path) -> int:
    """Highest step in metrics.jsonl so far (0 if none)."""
    path = run_dir / "metrics.jsonl"
    found = re.findall(r'"step": (\d+)', path.read_text()) if path.exists() else []
    return max(map(int, found), default=0)


def _tmp_dirs(run_dir: Path) -> set[str]:
    root = run_dir / "checkpoints"
    return {p.name for p in root.glob("step_*.tmp-*")} if root.is_dir() else set()


def _wait_for(proc, ready, timeout: float = 300.0) -> bool:
    """Poll `ready()` until it is true (True) or the process exits first (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ready():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(POLL_S)
    raise AssertionError(f"timed out waiting; log {proc.log}")


def _kill_once(run_dir: Path, corpus: Path, steps: int, mode: str, rng: random.Random, n: int) -> dict | None:
    """Launch, kill at a `mode` moment; returns the kill point, or None if the run finished first."""
    old_tmp, start_step = _tmp_dirs(run_dir), _logged_step(run_dir)
    # Its own token cache: a kill during the first launch's start-up may land in tokenization.
    proc = runs.start(run_dir, corpus, *_common(steps), f"data.cache_dir={run_dir.parent / 'cache'}",
                      log=run_dir.parent / f"launch{n:02d}.log")
    if mode == "start-up":
        time.sleep(rng.uniform(0.2, 4.0))
        alive = proc.poll() is None
    elif mode == "mid-training":
        target = start_step + rng.randint(1, 2)
        alive = _wait_for(proc, lambda: _logged_step(run_dir) >= target)
        time.sleep(rng.uniform(0.0, 0.4))
    else:
        alive = _wait_for(proc, lambda: bool(_tmp_dirs(run_dir) - old_tmp))
    if alive:
        os.kill(proc.pid, signal.SIGKILL)  # this one process only: never by name
    code = proc.wait()
    if code == 0:
        return None
    assert code == -signal.SIGKILL, f"exit {code}; log {proc.log}:\n{Path(proc.log).read_text()[-3000:]}"
    if mode == "checkpoint write" and not (_tmp_dirs(run_dir) - old_tmp):
        mode = "just after a checkpoint write"  # the rename won the race against the kill
    return {"mode": mode, "log": proc.log, "step": _logged_step(run_dir)}


def _check_visible_checkpoints(run_dir: Path) -> Path | None:
    """Every final-named checkpoint is complete; returns the newest (None before the first)."""
    dirs = runs.step_dirs(run_dir)
    for d in dirs:
        validate_checkpoint(d)  # raises, naming what is missing or truncated
    return dirs[-1] if dirs else None


def _resumed_from(log: Path) -> str | None:
    match = re.search(r"resumed from (\S+) at step (\d+)", Path(log).read_text())
    return match.group(1) if match else None


def _campaign(tmp_path: Path, corpus: Path, kills: int, steps: int) -> None:
    rng = random.Random(SEED)
    reference = tmp_path / "reference"
    runs.run_cli(reference, corpus, *_common(steps))
    run = tmp_path / "killed" / "run"
    run.parent.mkdir()
    points, expected = [], None
    for i in range(kills):
        mode = MODES[i % 3] if kills <= 3 else rng.choice(MODES)
        point = _kill_once(run, corpus, steps, mode, rng, i)
        if point is None:
            pytest.fail(f"the run finished after {i} kills; raise steps above {steps} for {kills} kills")
        if expected is not None:  # this launch had to resume from the newest checkpoint of the last kill
            assert _resumed_from(point["log"]) in (str(expected), None), point["log"]
        expected = _check_visible_checkpoints(run)
        points.append(point)
        record("kill points", point["mode"])
    final = runs.run_cli(run, corpus, *_common(steps), f"data.cache_dir={run.parent / 'cache'}")
    if expected is not None:
        assert f"resumed from {expected}" in final.stderr, final.stderr[-3000:]
    ref_w, got_w = runs.exported_weights(reference), runs.exported_weights(run)
    assert ref_w.keys() == got_w.keys() and all(torch.equal(ref_w[k], got_w[k]) for k in ref_w)
    ref_loss = {s: row["loss"] for s, row in runs.metrics(reference).items()}
    rows = runs.metric_rows(run)  # every launch's rows: a step re-run after a kill logs the same loss
    assert {r["step"] for r in rows} == set(ref_loss)
    assert all(r["loss"] == ref_loss[r["step"]] for r in rows)
    assert len(points) == kills
    print("kill points:", [(p["mode"], p["step"]) for p in points])


def test_sigkill_three_times_then_resume_exactly(tmp_path, corpus):
    _campaign(tmp_path, corpus, kills=3, steps=8)


@pytest.mark.slow
def test_sigkill_at_21_random_moments_then_resume_exactly(tmp_path, corpus):
    _campaign(tmp_path, corpus, kills=21, steps=60)
