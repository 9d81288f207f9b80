"""Resume with a different data-parallel size keeps the global data order (2 -> 1 and 1 -> 2 processes).

With the global batch fixed (`train.tokens_per_step`), one process takes 2 micro-batches
per step where two processes take one each; the loader's cursor is global, so both read
the same tokens per step. A checkpoint written by N ranks loads into M (DCP re-shards; the
per-rank RNG is re-seeded, which this model never draws from). So a run resumed on the other
world size must read exactly the tokens the uninterrupted run reads: the loader state in
every later checkpoint is *equal*, and the per-step losses agree to float tolerance (the
gradient is reduced in another order, so not bit for bit).
"""

from __future__ import annotations

import pytest
import reliability_runs as runs

STEPS = ["train.steps=5", "train.tokens_per_step=512", "checkpoint.interval=1", "checkpoint.keep=10",
         "checkpoint.export_safetensors=false"]
RESUME_AT = 2


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """Uninterrupted runs on 1 and on 2 processes (checkpoint every step)."""
    corpus = runs.small_corpus(tmp_path_factory)
    root = tmp_path_factory.mktemp("resize")
    for nproc in (1, 2):
        runs.run_cli(root / f"ref{nproc}", corpus, *STEPS, nproc=nproc)
    return corpus, root


def _by_step(run_dir):
    return {int(p.name[5:]): p for p in runs.step_dirs(run_dir)}


@pytest.mark.distributed
@pytest.mark.parametrize("before,after", [(2, 1), (1, 2)])
def test_resume_on_another_world_size_reads_the_same_tokens(references, before, after):
    corpus, root = references
    start = root / f"ref{before}" / "checkpoints" / f"step_{RESUME_AT:08d}"
    resumed = root / f"resumed{before}to{after}"
    proc = runs.run_cli(resumed, corpus, *STEPS, f"resume={start}", nproc=after)
    assert f"resumed from {start}" in proc.stderr
    assert f"written by {before} ranks, this run has {after}" in proc.stderr  # the RNG re-seed warning
    ref = _by_step(root / f"ref{after}")
    got = _by_step(resumed)
    assert sorted(got) == list(range(RESUME_AT + 1, 6))
    for step, path in got.items():
        mine, theirs = runs.app_state(path), runs.app_state(ref[step])
        assert mine["train_loader"] == theirs["train_loader"], step  # exactly the same global cursor
        assert mine["train_state"] == theirs["train_state"], step
    ref_loss, got_loss = runs.metrics(root / f"ref{after}"), runs.metrics(resumed)
    for step in got:
        assert got_loss[step]["loss"] == pytest.approx(ref_loss[step]["loss"], rel=1e-4, abs=1e-5), step
