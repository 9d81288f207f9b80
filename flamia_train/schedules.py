r"""Step schedules: the learning rate as a pure function of the optimizer step.

Shapes (``total_steps`` = T, ``warmup_steps`` = W, ``base_lr`` = peak, ``min_lr = peak * min_lr_ratio``):

```
cosine    /‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾\___       linear warm-up 0..W, then
         0      W                                            T     cosine from peak to min_lr at T
wsd       /‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾\            warm-up, stable plateau, then a
         0      W                           T-D     \_____ T     decay of D = decay_fraction*T steps
constant  /‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾‾   warm-up, then the peak forever
```

Because ``lr_at(step)`` depends on nothing but the step, a resumed run needs
only the step counter to continue on the same curve; ``state_dict`` exists so the
schedule is checkpointed like every other Stateful and a changed schedule on
resume is noticed (see ``LRSchedule.load_state_dict``).

The context-length schedule (sequence length, RoPE, micro-batch per stage) is
``ScheduleConfig.context``, owned by ``flamia_train.context``; ``name`` selects the
preset YAML in ``configs/schedule/``.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

from flamia_train.context import ContextConfig
from flamia_train.errors import ConfigError

LR_SCHEDULES = ("cosine", "wsd", "constant")
DECAY_SHAPES = ("linear", "cosine", "sqrt")


@dataclass
class ScheduleConfig:
    """Step schedules of a run: the LR curve below, the context stages in `context`."""

    name: str = "fixed"  # preset name (configs/schedule/<name>.yaml); "fixed" = one context length
    lr_schedule: str = "cosine"  # LR curve after warm-up: cosine | wsd | constant
    warmup_steps: int = 100  # linear warm-up from 0 to base_lr over this many steps
    min_lr_ratio: float = 0.1  # final LR as a fraction of base_lr (cosine and wsd), in [0, 1]
    decay_fraction: float = 0.2  # wsd: fraction of total steps spent in the final decay, in [0, 1]
    decay_shape: str = "linear"  # wsd decay curve: linear | cosine | sqrt
    context: ContextConfig = field(default_factory=ContextConfig)  # seq_len / RoPE / micro-batch stages


def validate_schedule(cfg: ScheduleConfig, total_steps: int) -> None:
    """Raise ``ConfigError`` naming the first bad ``schedule.*`` value for a run of ``total_steps``."""
    if cfg.lr_schedule not in LR_SCHEDULES:
        raise ConfigError("schedule.lr_schedule", cfg.lr_schedule, f"one of {', '.join(LR_SCHEDULES)}")
    if cfg.decay_shape not in DECAY_SHAPES:
        raise ConfigError("schedule.decay_shape", cfg.decay_shape, f"one of {', '.join(DECAY_SHAPES)}")
    if total_steps < 1:
        raise ConfigError("train.steps", total_steps, "a positive number of steps")
    if not isinstance(cfg.warmup_steps, int) or cfg.warmup_steps < 0:
        raise ConfigError("schedule.warmup_steps", cfg.warmup_steps, "an integer >= 0")
    if cfg.warmup_steps >= total_steps:
        raise ConfigError(
            "schedule.warmup_steps", cfg.warmup_steps, f"fewer than the total steps ({total_steps})"
        )
    for key in ("min_lr_ratio", "decay_fraction"):
        value = getattr(cfg, key)
        if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ConfigError(f"schedule.{key}", value, "a number in [0, 1]")
    if cfg.lr_schedule == "wsd":
        decay_steps = round(cfg.decay_fraction * total_steps)
        if cfg.warmup_steps + decay_steps > total_steps:
            raise ConfigError(
                "schedule.decay_fraction",
                cfg.decay_fraction,
                f"warm-up ({cfg.warmup_steps}) + decay ({decay_steps}) steps must fit in {total_steps} steps",
            )


def _decay(shape: str, progress: float) -> float:
    """Multiplier going from 1 (progress 0) to 0 (progress 1) along ``shape``."""
    if shape == "linear":
        return 1.0 - progress
    if shape == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    # "1 - sqrt" drops fastest at the start of the cool-down (as in the WSD papers).
    return 1.0 - math.sqrt(progress)


class LRSchedule:
    """Learning rate per optimizer step: ``lr_at(step)`` for step in ``[0, total_steps]``."""

    def __init__(self, cfg: ScheduleConfig, base_lr: float, total_steps: int):
        validate_schedule(cfg, total_steps)
        if base_lr <= 0:
            raise ConfigError("train.lr", base_lr, "a positive learning rate")
        self.kind = cfg.lr_schedule
        self.base_lr = float(base_lr)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(cfg.warmup_steps)
        self.min_lr = self.base_lr * float(cfg.min_lr_ratio)
        self.decay_shape = cfg.decay_shape
        self.decay_steps = round(cfg.decay_fraction * total_steps) if self.kind == "wsd" else 0

    def lr_at(self, step: int) -> float:
        """LR (same unit as ``base_lr``) for 0-based ``step``; steps past the end keep the final LR."""
        step = min(max(int(step), 0), self.total_steps)
        if step < self.warmup_steps:
            # (step + 1) so step 0 already moves the weights; reaches the peak at step W-1 -> W.
            return self.base_lr * (step + 1) / (self.warmup_steps + 1)
        if self.kind == "constant":
            return self.base_lr
        if self.kind == "cosine":
            span = self.total_steps - self.warmup_steps
            return self._between(_decay("cosine", (step - self.warmup_steps) / span))
        decay_start = self.total_steps - self.decay_steps
        if step < decay_start or self.decay_steps == 0:
            return self.base_lr
        return self._between(_decay(self.decay_shape, (step - decay_start) / self.decay_steps))

    def _between(self, factor: float) -> float:
        return self.min_lr + (self.base_lr - self.min_lr) * factor

    def state_dict(self) -> dict:
        """The schedule's parameters; the position is the trainer's step, saved elsewhere."""
        return {
            "kind": self.kind,
            "base_lr": self.base_lr,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "min_lr": self.min_lr,
            "decay_shape": self.decay_shape,
            "decay_steps": self.decay_steps,
        }

    def load_state_dict(self, state: dict) -> None:
        """Compare a checkpoint's schedule with this one; warn on each difference, keep this one.

        Changing the schedule on resume is a legitimate user action (extend
        ``train.steps``, lower the LR after a spike), so the current config wins
        and the difference is reported instead of refused.
        """
        mine = self.state_dict()
        diffs = [f"{k}: checkpoint {state.get(k)!r} -> now {v!r}"
                 for k, v in mine.items() if state.get(k) != v]
        if diffs:
            warnings.warn(
                "resumed run uses a different LR schedule than its checkpoint (keeping the new one): "
                + "; ".join(diffs),
                stacklevel=2,
            )
