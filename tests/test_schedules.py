"""LR schedules: values at the key steps of each curve, resume semantics, and bad configs."""
import math
import random

import pytest

from flamia_train.errors import ConfigError
from flamia_train.schedules import LRSchedule, ScheduleConfig, validate_schedule


def _base_lr() -> float:
    # A fresh peak each test run so no formula passes by coincidence with a round number.
    return random.uniform(1e-4, 1e-2)


def test_warmup_is_linear_and_reaches_the_peak():
    lr = _base_lr()
    s = LRSchedule(ScheduleConfig(lr_schedule="cosine", warmup_steps=10), lr, 100)
    assert s.lr_at(0) == pytest.approx(lr / 11)
    assert s.lr_at(4) == pytest.approx(lr * 5 / 11)
    assert s.lr_at(10) == pytest.approx(lr)
    steps = [s.lr_at(i) for i in range(11)]
    assert all(a < b for a, b in zip(steps[:-1], steps[1:], strict=True))


def test_cosine_midpoint_and_end():
    lr = _base_lr()
    s = LRSchedule(ScheduleConfig(lr_schedule="cosine", warmup_steps=20, min_lr_ratio=0.1), lr, 220)
    assert s.lr_at(120) == pytest.approx(lr * (0.1 + 0.9 * 0.5))
    assert s.lr_at(70) == pytest.approx(lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4))))
    assert s.lr_at(220) == pytest.approx(lr * 0.1)
    assert s.lr_at(10_000) == pytest.approx(lr * 0.1)  # past the end: stays at min_lr


@pytest.mark.parametrize(
    "shape,half",
    [("linear", 0.5), ("cosine", 0.5), ("sqrt", 1 - math.sqrt(0.5))],
)
def test_wsd_plateau_and_decay(shape, half):
    lr = _base_lr()
    cfg = ScheduleConfig(lr_schedule="wsd", warmup_steps=10, decay_fraction=0.2, min_lr_ratio=0.05,
                         decay_shape=shape)
    s = LRSchedule(cfg, lr, 200)  # decay over steps 160..200
    assert s.lr_at(10) == pytest.approx(lr)
    assert s.lr_at(100) == pytest.approx(lr)
    assert s.lr_at(159) == pytest.approx(lr)
    assert s.lr_at(180) == pytest.approx(lr * (0.05 + 0.95 * half))
    assert s.lr_at(200) == pytest.approx(lr * 0.05)


def test_constant_and_zero_warmup():
    lr = _base_lr()
    s = LRSchedule(ScheduleConfig(lr_schedule="constant", warmup_steps=0), lr, 50)
    assert [s.lr_at(i) for i in (0, 25, 50)] == pytest.approx([lr, lr, lr])


def test_state_dict_round_trip_and_changed_schedule_warns():
    lr = _base_lr()
    old = LRSchedule(ScheduleConfig(warmup_steps=5), lr, 100)
    same = LRSchedule(ScheduleConfig(warmup_steps=5), lr, 100)
    same.load_state_dict(old.state_dict())  # identical: silent
    longer = LRSchedule(ScheduleConfig(warmup_steps=5), lr, 300)
    with pytest.warns(UserWarning, match="total_steps"):
        longer.load_state_dict(old.state_dict())
    assert longer.lr_at(300) == pytest.approx(lr * 0.1)  # the new schedule is the one in force


@pytest.mark.parametrize(
    "overrides,steps,key",
    [
        ({"lr_schedule": "linear"}, 100, "schedule.lr_schedule"),
        ({"decay_shape": "exp"}, 100, "schedule.decay_shape"),
        ({"warmup_steps": 100}, 100, "schedule.warmup_steps"),
        ({"warmup_steps": -1}, 100, "schedule.warmup_steps"),
        ({"min_lr_ratio": 1.5}, 100, "schedule.min_lr_ratio"),
        ({"min_lr_ratio": -0.1}, 100, "schedule.min_lr_ratio"),
        ({"decay_fraction": 2.0}, 100, "schedule.decay_fraction"),
        ({"lr_schedule": "wsd", "warmup_steps": 90, "decay_fraction": 0.5}, 100, "schedule.decay_fraction"),
        ({}, 0, "train.steps"),
    ],
)
def test_bad_schedules_name_the_key(overrides, steps, key):
    with pytest.raises(ConfigError) as err:
        validate_schedule(ScheduleConfig(**{"warmup_steps": 10, **overrides}), steps)
    assert err.value.key == key
    assert key in str(err.value)


def test_nonpositive_base_lr_rejected():
    with pytest.raises(ConfigError, match="train.lr"):
        LRSchedule(ScheduleConfig(warmup_steps=1), -1e-3, 10)


def test_shipped_schedule_yaml_matches_the_schema():
    from pathlib import Path

    from omegaconf import OmegaConf

    path = Path(__file__).parents[1] / "configs" / "schedule" / "fixed.yaml"
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ScheduleConfig), OmegaConf.load(path)))
    validate_schedule(cfg, 1000)
    assert cfg == ScheduleConfig()  # the preset spells out the defaults
