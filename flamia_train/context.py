r"""The context schedule: sequence length, RoPE and micro-batch per optimizer step, tokens/step constant.

```
stages (schedule.context.stages, starts by step or by fraction of the run = of its tokens):
  stage 0  start 0     seq_len 256  ramp_to 4096   linear warm-up, snapped to admissible lengths
  stage 1  start 0.1   seq_len 4096                constant
  stage 2  start 0.9   seq_len 32768 rope_theta 5e5   extension with a RoPE change (ABF, or
                                                     rope_scaling linear | ntk | yarn)
step s ─▶ ContextPoint(stage, seq_len, micro_batch, accum, rope_theta, rope)   a pure function of s
tokens_per_step = micro_batch × seq_len × ranks × accum      the same at every step
```

Because `at(step)` reads nothing but the step, a resumed run needs only the step
counter (the loader's cursor does not depend on the row shape, so re-packing at a
stage change neither loses nor repeats a token). A seq-len ramp moves through
*admissible* lengths only: multiples of the attention block whose micro-batches give
an integral accumulation; the linear target is rounded down to the nearest one.

`train.tokens_per_step = 0` means: one micro-batch of `train.micro_batch_size ×
train.seq_len` on every rank, raised to the least common multiple with every stage's
row (`micro_batch × seq_len × ranks`), so every stage divides it. A stage's
`micro_batch = 0` picks the largest micro-batch that holds at most `train.micro_batch_size
× train.seq_len` tokens and divides the step: memory per forward stays about level.
No stages: `train.seq_len` and `train.micro_batch_size` for the whole run.
"""
from __future__ import annotations

import bisect
import math
import warnings
from dataclasses import asdict, dataclass, field

from flamia_train.errors import ConfigError
from flamia_train.metrics import reset_peak_memory
from flamia_train.rope import RopeScaling

UNITS = ("step", "fraction")


@dataclass
class ContextStage:
    """One stage of the context schedule (an entry of `schedule.context.stages`)."""

    start: float = 0.0  # first step (unit=step) or fraction of train.steps (unit=fraction); stage 0 starts at 0
    seq_len: int = 0  # tokens per row; a multiple of the attention block (flamia_kernels.SEQ_BLOCK)
    ramp_to: int = 0  # > seq_len: grow linearly to this length across the stage (warm-up); 0 = constant
    micro_batch: int = 0  # rows per rank per forward; 0 = auto (about train.micro_batch_size x train.seq_len tokens)
    rope_theta: float | None = None  # RoPE base from this stage on (ABF when raised); null = keep the previous
    rope_scaling: str | None = None  # none | linear | ntk | yarn from this stage on; null = keep the previous
    rope_factor: float = 0.0  # scaling factor >= 1; 0 = this stage's longest length / original_seq_len
    original_seq_len: int = 0  # context the scaling extends; 0 = the longest length of the earlier stages


@dataclass
class ContextConfig:
    """Context-length stages of a run (the `schedule.context` node); empty = one fixed length."""

    unit: str = "fraction"  # how stage starts are counted: step | fraction (of train.steps, i.e. of tokens)
    allow_decrease: bool = False  # allow a stage shorter than an earlier one (else a ConfigError)
    stages: list[ContextStage] = field(default_factory=list)  # empty = train.seq_len for the whole run


@dataclass(frozen=True)
class ContextPoint:
    """What one optimizer step trains with."""

    stage: int  # index into the stages
    seq_len: int  # tokens per row
    micro_batch: int  # rows per rank per forward/backward
    accum: int  # micro-batches per rank per optimizer step
    rope_theta: float  # RoPE base
    rope: RopeScaling  # RoPE rescaling (method "none" = plain)

    def shape(self) -> tuple[int, int]:
        return self.seq_len, self.micro_batch


@dataclass(frozen=True)
class _Stage:
    """A stage resolved to steps, with its admissible lengths (one entry unless it ramps)."""

    first: int
    end: int
    lengths: tuple[int, ...]
    ramp_to: int
    micro_batch: int  # 0 = auto
    rope_theta: float
    rope: RopeScaling


def _key(i: int, name: str) -> str:
    return f"schedule.context.stages[{i}].{name}"


class ContextSchedule:
    """Step → ContextPoint for a run of `total_steps` on `world_size` data-parallel ranks.

    `seq_len`, `micro_batch`, `tokens_per_step` are the `train.*` values (`tokens_per_step`
    0 = derived, module docstring); `rope_theta` is the model's; `block` the kernel's token
    block. Raises ConfigError naming the key for every bad stage.
    """

    def __init__(self, cfg: ContextConfig, *, total_steps: int, seq_len: int, micro_batch: int,
                 tokens_per_step: int, world_size: int, rope_theta: float, block: int):
        if cfg.unit not in UNITS:
            raise ConfigError("schedule.context.unit", cfg.unit, f"one of {', '.join(UNITS)}")
        self.world_size, self.block = world_size, block
        self.micro_tokens = micro_batch * seq_len  # the auto micro-batch's token budget
        stages = list(cfg.stages) or [ContextStage(start=0, seq_len=seq_len, micro_batch=micro_batch)]
        self.explicit = bool(cfg.stages)
        self._check_lengths(stages, cfg.allow_decrease)
        self.tokens_per_step = tokens_per_step or self._derived_tokens(stages, micro_batch * seq_len)
        starts = self._start_steps(cfg, stages, total_steps)
        self.stages: list[_Stage] = []
        theta, rope, longest = float(rope_theta), RopeScaling(), 0
        for i, st in enumerate(stages):
            end = starts[i + 1] if i + 1 < len(stages) else total_steps
            if st.rope_theta is not None:
                if not st.rope_theta > 0:
                    raise ConfigError(_key(i, "rope_theta"), st.rope_theta, "a RoPE base > 0")
                theta = float(st.rope_theta)
            if st.rope_scaling is not None:
                rope = self._scaling(i, st, longest)
            self.stages.append(_Stage(starts[i], end, self._lengths(i, st), st.ramp_to, st.micro_batch, theta, rope))
            longest = max(longest, st.seq_len, st.ramp_to)

    # ---- validation helpers ---------------------------------------------------------------
    def _field(self, i: int, name: str) -> str:
        """The key to blame: the stage's field, or train.* when the run has no explicit stages."""
        if self.explicit:
            return _key(i, name)
        return {"seq_len": "train.seq_len", "micro_batch": "train.micro_batch_size"}.get(name, _key(i, name))

    def _check_lengths(self, stages: list[ContextStage], allow_decrease: bool) -> None:
        longest = 0
        for i, st in enumerate(stages):
            for name in ("seq_len", "ramp_to"):
                value = getattr(st, name)
                if value < 0 or (name == "seq_len" and value == 0) or value % self.block:
                    raise ConfigError(self._field(i, name), value,
                                      f"a positive multiple of the attention block {self.block}"
                                      + (" (0 = no ramp)" if name == "ramp_to" else ""))
            if st.ramp_to and st.ramp_to <= st.seq_len:
                raise ConfigError(_key(i, "ramp_to"), st.ramp_to, f"longer than the stage's seq_len {st.seq_len}")
            if st.micro_batch < 0:
                raise ConfigError(self._field(i, "micro_batch"), st.micro_batch, ">= 0 (0 = auto)")
            if st.seq_len < longest and not allow_decrease:
                raise ConfigError(_key(i, "seq_len"), st.seq_len,
                                  f">= the earlier stages' {longest} (or schedule.context.allow_decrease=true)")
            longest = max(longest, st.seq_len, st.ramp_to)

    def _derived_tokens(self, stages: list[ContextStage], base: int) -> int:
        tokens = base * self.world_size
        for st in stages:
            for length in (st.seq_len, st.ramp_to):
                if length:
                    tokens = math.lcm(tokens, max(st.micro_batch, 1) * length * self.world_size)
        return tokens

    @staticmethod
    def _start_steps(cfg: ContextConfig, stages: list[ContextStage], total_steps: int) -> list[int]:
        starts = []
        for i, st in enumerate(stages):
            if cfg.unit == "fraction":
                if not 0 <= st.start < 1:
                    raise ConfigError(_key(i, "start"), st.start, "a fraction of train.steps in [0, 1)")
                step = round(st.start * total_steps)
            else:
                if st.start != int(st.start) or st.start < 0:
                    raise ConfigError(_key(i, "start"), st.start, "a whole step >= 0 (schedule.context.unit=step)")
                step = int(st.start)
            if i == 0 and step != 0:
                raise ConfigError(_key(0, "start"), st.start, "0: the first stage starts the run")
            if i and step <= starts[-1]:
                raise ConfigError(_key(i, "start"), st.start,
                                  f"after stage {i - 1} (step {starts[-1]}); here it is step {step} "
                                  f"of train.steps={total_steps}")
            if step >= total_steps:
                raise ConfigError(_key(i, "start"), st.start, f"a step before train.steps={total_steps}")
            starts.append(step)
        return starts

    def _admissible(self, length: int, micro_batch: int) -> bool:
        return length % self.block == 0 and self.tokens_per_step % (max(micro_batch, 1) * length * self.world_size) == 0

    def _lengths(self, i: int, st: ContextStage) -> tuple[int, ...]:
        if not self._admissible(st.seq_len, st.micro_batch):
            name = "micro_batch" if st.micro_batch else "seq_len"
            raise ConfigError(self._field(i, name), getattr(st, name),
                              f"a row of micro_batch x seq_len x {self.world_size} rank(s) = "
                              f"{max(st.micro_batch, 1) * st.seq_len * self.world_size} tokens must divide "
                              f"train.tokens_per_step = {self.tokens_per_step} (integral accumulation)")
        if not st.ramp_to:
            return (st.seq_len,)
        return tuple(n for n in range(st.seq_len, st.ramp_to, self.block) if self._admissible(n, st.micro_batch))

    def _scaling(self, i: int, st: ContextStage, longest: int) -> RopeScaling:
        original = st.original_seq_len or longest or st.seq_len
        if st.original_seq_len < 0:
            raise ConfigError(_key(i, "original_seq_len"), st.original_seq_len, ">= 0 (0 = longest earlier stage)")
        factor = st.rope_factor or max(st.seq_len, st.ramp_to) / original
        if st.rope_scaling != "none" and factor < 1:
            raise ConfigError(_key(i, "rope_factor"), st.rope_factor or factor,
                              f">= 1 (0 = stage length / original_seq_len {original})")
        if st.rope_scaling == "none":
            return RopeScaling()
        return RopeScaling(st.rope_scaling, float(factor), int(original)).check(_key(i, "rope_scaling"))

    # ---- the schedule ---------------------------------------------------------------------
    def stage_index(self, step: int) -> int:
        firsts = [s.first for s in self.stages]
        return max(bisect.bisect_right(firsts, max(int(step), 0)) - 1, 0)

    def at(self, step: int) -> ContextPoint:
        """The context of 0-based optimizer `step` (steps past the end keep the last stage)."""
        i = self.stage_index(step)
        st = self.stages[i]
        length = st.lengths[0]
        if st.ramp_to:
            span = max(st.end - st.first, 1)
            target = st.lengths[0] + (st.ramp_to - st.lengths[0]) * (step - st.first) / span
            length = st.lengths[max(bisect.bisect_right(st.lengths, target) - 1, 0)]
        micro = st.micro_batch or self._auto_micro_batch(length)
        accum = self.tokens_per_step // (micro * length * self.world_size)
        return ContextPoint(i, length, micro, accum, st.rope_theta, st.rope)

    def _auto_micro_batch(self, length: int) -> int:
        rows = self.tokens_per_step // (length * self.world_size)  # rows per rank per step
        cap = max(1, self.micro_tokens // length)
        return max(d for d in range(1, min(cap, rows) + 1) if rows % d == 0)

    def boundaries(self) -> list[int]:
        """Steps at which the point (length, micro-batch or RoPE) may change, in order."""
        return [s.first for s in self.stages]

    def describe(self) -> str:
        """One line per stage, for the start-up log."""
        lines = [f"context schedule: {self.tokens_per_step} tokens/step"]
        for i, st in enumerate(self.stages):
            p0, p1 = self.at(st.first), self.at(max(st.end - 1, st.first))
            length = f"{p0.seq_len}" if p0.seq_len == p1.seq_len else f"{p0.seq_len}->{p1.seq_len}"
            rope = "" if st.rope.method == "none" else f" {st.rope.method} x{st.rope.factor:g}"
            lines.append(f"  stage {i}: steps {st.first}-{st.end - 1} seq_len {length} micro_batch "
                         f"{p0.micro_batch} accum {p0.accum} rope_theta {st.rope_theta:g}{rope}")
        return "\n".join(lines)

    # ---- Stateful -------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The resolved schedule; the position is the trainer's step, saved elsewhere."""
        return {"tokens_per_step": self.tokens_per_step,
                "stages": [{**asdict(s), "rope": asdict(s.rope), "lengths": list(s.lengths)} for s in self.stages]}

    def load_state_dict(self, state: dict) -> None:
        """Warn (and keep this schedule) when the checkpoint's schedule differs: changing it is legitimate."""
        mine = self.state_dict()
        diffs = [k for k in mine if state.get(k) != mine[k]]
        if diffs:
            warnings.warn(f"resumed run uses a different context schedule than its checkpoint ({', '.join(diffs)} "
                          "differ; keeping the new one)", stacklevel=2)


def apply_point(point: ContextPoint, model, loaders) -> None:
    """Re-shape every loader and set the model's RoPE to `point` (re-packing keeps every token)."""
    for loader in loaders:
        loader.set_seq_len(point.seq_len, point.micro_batch)
    model.set_rope_theta(point.rope_theta)
    r = point.rope
    model.set_rope_scaling(r.method, r.factor, r.original_seq_len, r.beta_fast, r.beta_slow)


def build_context_schedule(context: ContextConfig, train, *, rope_theta: float, world_size: int) -> ContextSchedule:
    """The run's schedule from `schedule.context` and the `train` node (steps, seq_len, batch, tokens/step)."""
    from flamia_kernels import SEQ_BLOCK

    return ContextSchedule(context, total_steps=train.steps, seq_len=train.seq_len,
                           micro_batch=train.micro_batch_size, tokens_per_step=train.tokens_per_step,
                           world_size=world_size, rope_theta=rope_theta, block=SEQ_BLOCK)


class ContextController:
    """Applies the schedule's point to a live model and its loaders at each step of the loop."""

    def __init__(self, schedule: ContextSchedule, model, loaders, device):
        self.schedule, self.model, self.loaders, self.device = schedule, model, tuple(loaders), device
        self.point: ContextPoint | None = None

    def enter(self, step: int) -> bool:
        """Make `step`'s point current; True when that starts a new stage (not on the first call).

        A change re-packs the loaders from their cursors (no token lost or repeated) and sets
        RoPE; a new stage also resets the peak-memory counter, so peak memory is per stage.
        """
        point = self.schedule.at(step)
        if point == self.point:
            return False
        new_stage = self.point is not None and point.stage != self.point.stage
        apply_point(point, self.model, self.loaders)
        if new_stage:
            reset_peak_memory(self.device)
        self.point = point
        return new_stage
