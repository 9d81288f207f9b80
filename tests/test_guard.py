"""NaN / spike guard (flamia_train/guard.py): verdicts, state, and the real loop with injected faults.

The loop tests run the CLI body in-process with `train.inject_fault` (a testing aid that
multiplies chosen steps' loss by NaN, inf or 1e4) and check what the guard promises: a bad
step changes no weight and no optimizer state, it is counted in `guard/skipped_steps`, and
`max_bad_steps` bad steps in a row stop the run with exit code 3, a clear message and a
checkpoint of the last good weights, from which the run resumes.
"""

from __future__ import annotations

import math

import pytest
import reliability_runs as runs
import torch
from reliability_report import record
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from flamia_train.errors import ConfigError
from flamia_train.guard import SPIKE_FACTOR, FaultPlan, StepGuard, validate_guard


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    return runs.small_corpus(tmp_path_factory)


def _warm(guard: StepGuard, n: int = 8) -> None:
    for i in range(n):  # a loss that falls with a little noise, grad norms around 1
        guard.check(5.0 - 0.1 * i + 0.01 * (i % 3), 1.0 + 0.05 * (i % 2))


@pytest.mark.parametrize("loss,norm,why", [
    (math.nan, 1.0, "loss is nan"), (math.inf, 1.0, "loss is inf"), (4.0, math.nan, "grad norm is nan"),
    (4.0, math.inf, "grad norm is inf"), (50.0, 1.0, "loss spike"), (4.0, 40.0, "grad norm spike"),
])
def test_bad_steps_are_skipped_with_the_reason(loss, norm, why):
    guard = StepGuard(spike_sigma=6.0, spike_window=8, max_bad_steps=3)
    _warm(guard)
    verdict = guard.check(loss, norm)
    assert not verdict.ok and not verdict.stop and verdict.reason.startswith(why)
    assert guard.metrics() == {"guard/skipped_steps": 1, "guard/bad_streak": 1}


def test_spike_test_waits_for_half_a_window_and_ignores_falling_loss():
    guard = StepGuard(spike_sigma=6.0, spike_window=8, max_bad_steps=3)
    for loss in (9.0, 5.0, 1e3):  # too few good steps to judge a spike: accepted
        assert guard.check(loss, 1.0).ok
    _warm(guard)
    assert guard.check(0.01, 1.0).ok  # a sudden drop is not a spike
    assert guard.check(math.nan, 1.0).reason == "loss is nan"  # non-finite is judged from step one
    assert StepGuard(spike_sigma=0.0, spike_window=2).check(1e9, 1e9).ok  # sigma 0: spike test off


def test_k_consecutive_bad_steps_stop_and_a_good_step_resets_the_streak():
    guard = StepGuard(spike_sigma=6.0, spike_window=8, max_bad_steps=3)
    _warm(guard)
    assert [guard.check(math.nan, 1.0).stop for _ in range(2)] == [False, False]
    assert guard.check(4.0, 1.0).ok and guard.streak == 0
    verdicts = [guard.check(math.nan, 1.0) for _ in range(3)]
    assert [v.stop for v in verdicts] == [False, False, True]
    assert guard.skipped == 5
    guard.reset_streak()
    assert not guard.check(math.nan, 1.0).stop


def test_state_round_trip_gives_the_same_verdicts():
    a = StepGuard(spike_sigma=3.0, spike_window=6, max_bad_steps=4)
    _warm(a, 5)
    a.check(math.nan, 1.0)
    b = StepGuard(spike_sigma=3.0, spike_window=6, max_bad_steps=4)
    b.load_state_dict(a.state_dict())
    for loss, norm in [(4.5, 1.0), (30.0, 1.0), (4.4, 9.0), (4.3, 1.02)]:
        assert a.check(loss, norm) == b.check(loss, norm)
    assert a.state_dict() == b.state_dict()


def test_fault_plan_grammar():
    plan = FaultPlan.parse("nan@3+spike@5-7+inf@9")
    assert plan.faults == {3: "nan", 5: "spike", 6: "spike", 7: "spike", 9: "inf"}
    assert math.isnan(plan.loss_scale(3)) and plan.loss_scale(6) == SPIKE_FACTOR and plan.loss_scale(4) == 1.0
    assert len(FaultPlan.parse("")) == 0
    for bad in ("nan", "nan@0", "zap@3", "spike@5-4", "nan@3,spike@4"):
        with pytest.raises(ConfigError, match="train.inject_fault"):
            FaultPlan.parse(bad)
    with pytest.raises(ConfigError, match="train.max_bad_steps"):
        validate_guard(6.0, 128, 0, "")


def _weights(step_dir, out) -> dict:
    """Model and optimizer tensors of a DCP checkpoint, flattened to {name: tensor}."""
    dcp_to_torch_save(str(step_dir), str(out))
    flat = {}

    def walk(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}", v)
        elif isinstance(value, torch.Tensor):
            flat[prefix] = value

    walk("", torch.load(out, weights_only=False))
    return flat


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_injected_nan_and_spike_are_skipped_and_counted(tmp_path, corpus, capsys):
    run = tmp_path / "run"
    code = runs.run_inprocess(run, corpus, "train.steps=6", "checkpoint.interval=1", "checkpoint.keep=10",
                              "train.spike_window=4", "train.max_bad_steps=3", "train.inject_fault=nan@2+spike@5",
                              "checkpoint.export_safetensors=false")
    err = capsys.readouterr().err
    assert code == 0, err
    record("injected faults", "nan loss", 1)
    record("injected faults", "loss spike", 1)
    assert "guard: step 2 skipped (loss is nan)" in err and "guard: step 5 skipped (loss spike" in err
    rows = runs.metrics(run)
    assert [rows[s]["guard/skipped_steps"] for s in range(1, 7)] == [0, 1, 1, 1, 2, 2]
    dirs = {int(p.name[5:]): p for p in runs.step_dirs(run)}
    w = {s: _weights(dirs[s], tmp_path / f"w{s}.pt") for s in (1, 2, 3, 4, 5)}
    assert _same(w[1], w[2]) and _same(w[4], w[5])  # skipped: weights and AdamW moments unchanged
    assert not _same(w[2], w[3])  # a good step after a skipped one does update
    assert runs.app_state(dirs[6])["guard"]["skipped"] == 2


def test_consecutive_bad_steps_halt_with_a_checkpoint_then_resume(tmp_path, corpus, capsys):
    run = tmp_path / "run"
    common = ["train.steps=6", "checkpoint.interval=2", "checkpoint.keep=10", "train.max_bad_steps=3",
              "checkpoint.export_safetensors=false"]
    code = runs.run_inprocess(run, corpus, *common, "train.inject_fault=inf@3-5")
    err = capsys.readouterr().err
    record("injected faults", "inf loss", 3)
    assert code == 3, err
    assert "stopped at step 5 after 3 consecutive bad steps (train.max_bad_steps)" in err
    assert "loss is inf" in err and "step_00000005" in err
    w = {s: _weights(run / "checkpoints" / f"step_{s:08d}", tmp_path / f"w{s}.pt") for s in (2, 4, 5)}
    assert _same(w[2], w[4]) and _same(w[2], w[5])  # steps 3-5 skipped: the halt checkpoint holds step 2's
    step2 = runs.metrics(run)[2]
    assert math.isfinite(step2["loss"]) and step2["guard/skipped_steps"] == 0
    assert runs.app_state(run / "checkpoints" / "step_00000005")["guard"]["streak"] == 0
    code = runs.run_inprocess(run, corpus, *common)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "resumed from" in err and "step_00000005" in err
    assert runs.metrics(run)[6]["guard/skipped_steps"] == 3
