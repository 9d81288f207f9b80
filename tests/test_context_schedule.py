"""Context schedule: step -> (seq_len, RoPE, micro-batch, accumulation), constant tokens/step, bad stages.

The loader side (re-packing at a stage change keeps every token) and RoPE/document masking in
the model are here too; the CLI runs (seq-warmup, resume mid-stage) are in test_context_e2e.py.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from flamia_train.context import ContextConfig, ContextController, ContextSchedule, ContextStage
from flamia_train.errors import ConfigError
from flamia_train.schedules import ScheduleConfig

BLOCK = 128
CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def schedule(stages, *, steps=100, seq_len=256, micro_batch=8, tokens=0, world=1, theta=1e4, unit="step",
             allow_decrease=False) -> ContextSchedule:
    cfg = ContextConfig(unit=unit, allow_decrease=allow_decrease, stages=[ContextStage(**s) for s in stages])
    return ContextSchedule(cfg, total_steps=steps, seq_len=seq_len, micro_batch=micro_batch,
                           tokens_per_step=tokens, world_size=world, rope_theta=theta, block=BLOCK)


def test_no_stages_is_the_fixed_train_shape():
    mb, world = random.choice([1, 2, 4, 8]), random.choice([1, 2, 4])
    s = schedule([], seq_len=384, micro_batch=mb, tokens=384 * mb * world * 3, world=world)
    p = s.at(random.randrange(100))
    assert (p.stage, p.seq_len, p.micro_batch, p.accum, p.rope_theta, p.rope.method) == (0, 384, mb, 3, 1e4, "none")
    assert s.tokens_per_step == 384 * mb * world * 3


def test_stage_boundaries_and_rope_per_stage():
    s = schedule([{"start": 0, "seq_len": 256},
                  {"start": 30, "seq_len": 1024, "rope_theta": 5e5},
                  {"start": 70, "seq_len": 4096, "rope_scaling": "yarn"}], tokens=16384)
    got = {step: s.at(step) for step in (0, 29, 30, 69, 70, 99, 150)}
    assert [got[k].stage for k in (0, 29, 30, 69, 70, 99, 150)] == [0, 0, 1, 1, 2, 2, 2]
    assert [got[k].seq_len for k in (0, 29, 30, 70)] == [256, 256, 1024, 4096]
    assert [got[k].rope_theta for k in (29, 30, 70)] == [1e4, 5e5, 5e5]  # theta inherited by stage 2
    yarn = got[70].rope
    assert (yarn.method, yarn.factor, yarn.original_seq_len) == ("yarn", 4.0, 1024)  # auto factor and origin
    assert s.boundaries() == [0, 30, 70]


def test_tokens_per_step_constant_and_accumulation_integral():
    world = random.choice([1, 2])
    s = schedule([{"start": 0, "seq_len": 128, "ramp_to": 1024}, {"start": 40, "seq_len": 1024},
                  {"start": 80, "seq_len": 2048, "micro_batch": 1}], micro_batch=4, world=world)
    seen = set()
    for step in range(100):
        p = s.at(step)
        assert p.micro_batch * p.seq_len * world * p.accum == s.tokens_per_step
        assert p.seq_len % BLOCK == 0 and p.micro_batch >= 1 and p.accum >= 1
        seen.add(p.seq_len)
    assert {128, 256, 512, 1024, 2048} <= seen


def test_linear_ramp_is_monotone_snapped_and_reaches_the_target_stage():
    s = schedule([{"start": 0, "seq_len": 256, "ramp_to": 4096}, {"start": 60, "seq_len": 4096}],
                 tokens=3 * 4096 * 4, micro_batch=4)  # a factor 3: 384, 768, 1536, 3072 are admissible too
    lengths = [s.at(step).seq_len for step in range(70)]
    assert lengths == sorted(lengths) and lengths[0] == 256 and lengths[60:] == [4096] * 10
    for step in range(60):  # the largest admissible length <= the linear target
        target = 256 + (4096 - 256) * step / 60
        assert lengths[step] <= max(target, 256)
        assert s.tokens_per_step % lengths[step] == 0
    assert {384, 768, 1536, 3072} <= set(lengths)


def test_auto_micro_batch_keeps_tokens_per_forward_level():
    s = schedule([{"start": 0, "seq_len": 128}, {"start": 10, "seq_len": 512}, {"start": 20, "seq_len": 2048}],
                 seq_len=256, micro_batch=8)  # budget 2048 tokens per forward
    assert [(s.at(k).micro_batch, s.at(k).seq_len) for k in (0, 10, 20)] == [(16, 128), (4, 512), (1, 2048)]


def test_fraction_unit_counts_steps_and_tokens_alike():
    s = schedule([{"start": 0.0, "seq_len": 256}, {"start": 0.25, "seq_len": 512}], steps=200, unit="fraction")
    assert s.boundaries() == [0, 50]
    assert s.at(49).seq_len == 256 and s.at(50).seq_len == 512


def test_mapping_is_a_pure_function_of_the_step():
    stages = [{"start": 0, "seq_len": 128, "ramp_to": 512}, {"start": 13, "seq_len": 512, "rope_theta": 2e5}]
    a, b = schedule(stages), schedule(stages)
    order = list(range(100))
    random.shuffle(order)
    assert [a.at(k) for k in order] == [b.at(k) for k in sorted(order, key=order.index)]
    assert a.state_dict() == b.state_dict()


def test_changed_schedule_on_resume_warns_and_keeps_the_new_one():
    old = schedule([{"start": 0, "seq_len": 256}, {"start": 50, "seq_len": 512}])
    new = schedule([{"start": 0, "seq_len": 256}, {"start": 60, "seq_len": 512}])
    with pytest.warns(UserWarning, match="context schedule"):
        new.load_state_dict(old.state_dict())
    assert new.at(55).seq_len == 256


@pytest.mark.parametrize("stages,kwargs,key", [
    ([{"start": 0, "seq_len": 200}], {}, "schedule.context.stages[0].seq_len"),
    ([{"start": 0, "seq_len": 256, "ramp_to": 300}], {}, "schedule.context.stages[0].ramp_to"),
    ([{"start": 0, "seq_len": 512, "ramp_to": 256}], {}, "schedule.context.stages[0].ramp_to"),
    ([{"start": 0, "seq_len": 512}, {"start": 5, "seq_len": 256}], {}, "schedule.context.stages[1].seq_len"),
    ([{"start": 0, "seq_len": 256, "rope_theta": 0.0}], {}, "schedule.context.stages[0].rope_theta"),
    ([{"start": 0, "seq_len": 256, "rope_theta": -1e4}], {}, "schedule.context.stages[0].rope_theta"),
    ([{"start": 0, "seq_len": 256, "micro_batch": 3}], {"tokens": 2048}, "schedule.context.stages[0].micro_batch"),
    ([{"start": 0, "seq_len": 1024}], {"tokens": 1536}, "schedule.context.stages[0].seq_len"),
    ([{"start": 3, "seq_len": 256}], {}, "schedule.context.stages[0].start"),
    ([{"start": 0, "seq_len": 256}, {"start": 0, "seq_len": 512}], {}, "schedule.context.stages[1].start"),
    ([{"start": 0, "seq_len": 256}, {"start": 100, "seq_len": 512}], {}, "schedule.context.stages[1].start"),
    ([{"start": 0.0, "seq_len": 256}, {"start": 1.5, "seq_len": 512}], {"unit": "fraction"},
     "schedule.context.stages[1].start"),
    ([{"start": 0, "seq_len": 256, "rope_scaling": "rotary"}], {}, "schedule.context.stages[0].rope_scaling"),
    ([{"start": 0, "seq_len": 256}, {"start": 5, "seq_len": 512, "rope_scaling": "linear", "rope_factor": 0.5}],
     {}, "schedule.context.stages[1].rope_factor"),
    ([{"start": 0, "seq_len": 256}], {"unit": "tokens"}, "schedule.context.unit"),
])
def test_bad_stages_raise_config_error_naming_the_key(stages, kwargs, key):
    with pytest.raises(ConfigError) as err:
        schedule(stages, **kwargs)
    assert err.value.key == key and key in str(err.value)


def test_decreasing_stage_allowed_when_asked():
    s = schedule([{"start": 0, "seq_len": 512}, {"start": 5, "seq_len": 256}], allow_decrease=True)
    assert s.at(5).seq_len == 256


class _Recorder:
    """Stands in for the model and a loader: records what the controller sets."""

    def __init__(self):
        self.calls = []

    def set_seq_len(self, seq_len, micro_batch):
        self.calls.append(("shape", seq_len, micro_batch))

    def set_rope_theta(self, theta):
        self.calls.append(("theta", theta))

    def set_rope_scaling(self, method, factor, original, beta_fast, beta_slow):
        self.calls.append(("scaling", method, factor, original))


def test_controller_applies_only_changes_and_reports_new_stages():
    s = schedule([{"start": 0, "seq_len": 128, "ramp_to": 512}, {"start": 6, "seq_len": 512, "rope_theta": 2e5}])
    model, loader = _Recorder(), _Recorder()
    ctl = ContextController(s, model, [loader], torch.device("cpu"))
    new_stage = [ctl.enter(step) for step in range(10)]
    assert new_stage == [False] * 6 + [True] + [False] * 3
    shapes = [c for c in loader.calls if c[0] == "shape"]
    assert [c[1] for c in shapes] == sorted({s.at(k).seq_len for k in range(10)})  # once per distinct point
    assert ("theta", 2e5) in model.calls


def test_shipped_presets_compose_into_the_schema():
    for name in ("fixed", "seq-warmup", "long-context"):
        yaml = OmegaConf.load(CONFIGS / "schedule" / f"{name}.yaml")
        root = OmegaConf.create({"train": {"seq_len": 1024}, "schedule": OmegaConf.structured(ScheduleConfig)})
        cfg = OmegaConf.to_object(OmegaConf.merge(root, {"schedule": yaml}).schedule)  # ${train.seq_len} resolves
        s = ContextSchedule(cfg.context, total_steps=1000, seq_len=1024, micro_batch=4, tokens_per_step=0,
                            world_size=1, rope_theta=1e4, block=BLOCK)
        assert s.at(999).seq_len == {"fixed": 1024, "seq-warmup": 1024, "long-context": 32768}[name]
    assert s.at(999).rope_theta == 5e5
