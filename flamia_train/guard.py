"""NaN / spike guard: decides after each backward whether the optimizer may apply the step.

    loss, grad norm ─▶ finite? ──no──────────────────────────────┐
                        │ yes                                     ▼
                        ▼                                   skip the update (grads zeroed),
       above mean + spike_sigma·std of the last   ──yes──▶  count it (guard/skipped_steps)
       spike_window *good* steps?                                 │
                        │ no                                      ▼
                        ▼                             max_bad_steps in a row? ──yes──▶ stop:
                 apply the update                                                 checkpoint of the
                                                                                  last good weights,
                                                                                  exit 3 with the reason

Why skip instead of re-running the step (Megatron) or raising: a skipped step costs one
batch of data and keeps the run alive through a rare bad batch or a transient overflow,
while a persistent problem still ends the run after K steps with a clear message. Only
upward spikes count (a loss that falls fast is good news). The loss and the grad norm the
guard sees are already global (all-reduced / full-tensor), so every rank reaches the same
verdict without another collective.

The statistics use good steps only, so a burst of bad steps cannot drag the threshold up.
The spike test starts once the window holds half of `spike_window` values (as OLMo-core's
skip-step optimizer does): the first steps of a run have nothing to compare against.

`FaultPlan` is a TESTING AID (`train.inject_fault`): it corrupts the loss of chosen steps
with NaN, inf or a large factor so the tests can drive the guard through the real loop.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass

from flamia_train.errors import ConfigError, FlamiaError

SPIKE_FACTOR = 1.0e4  # what `spike@S` multiplies the loss (and so the gradients) by
FAULT_KINDS = {"nan": math.nan, "inf": math.inf, "spike": SPIKE_FACTOR}
_FAULT = re.compile(r"^(nan|inf|spike)@(\d+)(?:-(\d+))?$")
FAULT_GRAMMAR = "'' or KIND@STEP or KIND@FIRST-LAST joined by '+', KIND one of nan, inf, spike (STEP >= 1)"
# A window whose values barely move (std ~ 0) would flag any tiny rise: the spread used is at
# least this fraction of the mean.
_MIN_RELATIVE_STD = 1e-3


class TrainingHalted(FlamiaError):
    """The run stopped itself (the guard saw too many bad steps in a row); exit code 3."""

    exit_code = 3


def validate_guard(spike_sigma: float, spike_window: int, max_bad_steps: int, inject_fault: str) -> None:
    """ConfigError for a guard setting the loop cannot use (keys under `train.`)."""
    if not spike_sigma >= 0:
        raise ConfigError("train.spike_sigma", spike_sigma, "must be >= 0 (0 = no spike test)")
    if spike_window < 2:
        raise ConfigError("train.spike_window", spike_window, "must be >= 2 (a std needs two values)")
    if max_bad_steps < 1:
        raise ConfigError("train.max_bad_steps", max_bad_steps, "must be >= 1")
    FaultPlan.parse(inject_fault)


@dataclass(frozen=True)
class Verdict:
    """What the guard decided about one step."""

    ok: bool  # apply the optimizer update
    reason: str = ""  # why not (empty when ok)
    stop: bool = False  # too many bad steps in a row: end the run


class _Window:
    """The last `size` good values of one quantity, with mean and (population) std."""

    def __init__(self, size: int):
        self.values: deque[float] = deque(maxlen=size)

    def outlier(self, value: float, sigma: float) -> str:
        """A description of how `value` exceeds mean + sigma·std, or '' when it does not."""
        if sigma <= 0 or len(self.values) < max(2, self.values.maxlen // 2):
            return ""
        n = len(self.values)
        mean = sum(self.values) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in self.values) / n)
        spread = max(std, _MIN_RELATIVE_STD * abs(mean))
        if value - mean <= sigma * spread:
            return ""
        return f"{value:.6g} > mean {mean:.6g} + {sigma:g} sigma (sigma {spread:.3g}) of the last {n} good steps"


class StepGuard:
    """Stateful verdicts on (loss, grad norm) per step; saved in checkpoints (build.Run._app_state)."""

    def __init__(self, spike_sigma: float = 6.0, spike_window: int = 128, max_bad_steps: int = 8):
        self.sigma, self.max_bad = spike_sigma, max_bad_steps
        self.loss, self.grad_norm = _Window(spike_window), _Window(spike_window)
        self.skipped = 0  # steps skipped over the whole run
        self.streak = 0  # consecutive skipped steps up to now

    def check(self, loss: float, grad_norm: float) -> Verdict:
        """Judge one step from its global loss and pre-clip grad norm; updates the counters."""
        reason = ""
        for name, value, window in (("loss", loss, self.loss), ("grad norm", grad_norm, self.grad_norm)):
            if not math.isfinite(value):
                reason = f"{name} is {value}"
            elif outlier := window.outlier(value, self.sigma):
                reason = f"{name} spike: {outlier}"
            if reason:
                break
        if not reason:
            self.loss.values.append(loss)
            self.grad_norm.values.append(grad_norm)
            self.streak = 0
            return Verdict(ok=True)
        self.skipped += 1
        self.streak += 1
        return Verdict(ok=False, reason=reason, stop=self.streak >= self.max_bad)

    def reset_streak(self) -> None:
        """Forget the current run of bad steps (a resume after a halt gets K fresh chances)."""
        self.streak = 0

    def metrics(self) -> dict:
        return {"guard/skipped_steps": self.skipped, "guard/bad_streak": self.streak}

    def state_dict(self) -> dict:
        return {"loss": list(self.loss.values), "grad_norm": list(self.grad_norm.values),
                "skipped": self.skipped, "streak": self.streak}

    def load_state_dict(self, state: dict) -> None:
        self.loss.values.clear()
        self.loss.values.extend(float(v) for v in state["loss"])
        self.grad_norm.values.clear()
        self.grad_norm.values.extend(float(v) for v in state["grad_norm"])
        self.skipped, self.streak = int(state["skipped"]), int(state["streak"])


class FaultPlan:
    """TESTING AID: which steps get a corrupted loss (`train.inject_fault`); empty in real runs."""

    def __init__(self, faults: dict[int, str]):
        self.faults = faults

    @classmethod
    def parse(cls, text: str) -> FaultPlan:
        """'nan@3+spike@5-7' -> steps 3 (NaN) and 5, 6, 7 (spike); ConfigError naming the bad part."""
        faults: dict[int, str] = {}
        for part in filter(None, (p.strip() for p in text.split("+"))):
            match = _FAULT.match(part)
            first = int(match.group(2)) if match else 0
            last = int(match.group(3) or first) if match else 0
            if not match or first < 1 or last < first:
                raise ConfigError("train.inject_fault", text, f"bad part {part!r}; allowed: {FAULT_GRAMMAR}")
            faults.update({s: match.group(1) for s in range(first, last + 1)})
        return cls(faults)

    def loss_scale(self, step: int) -> float:
        """Factor for the loss of 1-based `step` (1.0 when nothing is injected there)."""
        kind = self.faults.get(step)
        return 1.0 if kind is None else FAULT_KINDS[kind]

    def __len__(self) -> int:
        return len(self.faults)
