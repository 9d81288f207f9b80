"""Precision schedule: a recipe that changes inside one run, and the controller that applies it.

```
precision.schedule: [{at: "90%", recipe: bf16}]           step:  0 ........ 900 ........ 1000
  phase 0  = the recipe itself (default + layers)                 fp8      |    bf16
  phase i  = `recipe` (or the run's own recipe) + `default` + `layers` changes
```

A switch point is `at: <step>` (an int), `at: "<P>%"` (of train.steps) or `tokens: <N>`
(the first step once N tokens have been trained on). Each phase is resolved from the run's
recipe (or the named `recipe`), not from the previous phase, so phases read independently.
The phase is a pure function of the step: a resume on either side of a switch recomputes
it from the restored step, and no precision state lives in checkpoints.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flamia_train.errors import ConfigError
from flamia_train.precision import (
    LINEAR_OPS,
    LM_HEAD,
    OpDefaults,
    Policy,
    PrecisionConfig,
    resolve_policy,
    resolve_recipe,
)

RECIPE_DIR = Path(__file__).resolve().parents[1] / "configs" / "precision"
SWITCH_KEYS = ("at", "tokens", "recipe", "default", "layers")


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


def load_recipe(name: str, key: str = "precision") -> PrecisionConfig:
    """The shipped recipe configs/precision/<name>.yaml as a typed PrecisionConfig."""
    from omegaconf import OmegaConf

    path = RECIPE_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(key, name, f"unknown recipe; allowed: {', '.join(recipe_names())}")
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PrecisionConfig), OmegaConf.load(path)))


@dataclass
class Phase:
    """One stretch of the run in one policy."""

    start: int  # first optimizer step (0-based: the count of completed steps) run in this policy
    label: str  # shown in logs: the recipe name, "+changes" when the entry edits it
    policy: Policy


class PrecisionPlan:
    """The phases of a run in step order; `phases[0]` starts at step 0."""

    def __init__(self, phases: list[Phase]):
        self.phases = phases

    def index_at(self, step: int) -> int:
        """Index of the phase that runs optimizer step `step` (0-based)."""
        return max(i for i, p in enumerate(self.phases) if p.start <= step)

    def policy_at(self, step: int) -> Policy:
        return self.phases[self.index_at(step)].policy

    def describe(self) -> str:
        return ", ".join(f"{p.label} from step {p.start}" for p in self.phases)


def _switch_step(key: str, entry: Mapping, total_steps: int, tokens_per_step: int) -> int:
    if ("at" in entry) == ("tokens" in entry):
        raise ConfigError(key, dict(entry), "give exactly one of at: <step> | \"<P>%\", or tokens: <N>")
    if "tokens" in entry:
        tokens = entry["tokens"]
        if not isinstance(tokens, int) or tokens <= 0:
            raise ConfigError(f"{key}.tokens", tokens, "a positive integer token count")
        return math.ceil(tokens / tokens_per_step)
    at = entry["at"]
    text = str(at).strip()
    if text.endswith("%"):
        try:
            pct = float(text[:-1])
        except ValueError:
            raise ConfigError(f"{key}.at", at, "a step (int) or a percentage of train.steps like \"90%\"") from None
        return round(total_steps * pct / 100)
    if isinstance(at, bool) or not text.isdigit():
        raise ConfigError(f"{key}.at", at, "a step (int) or a percentage of train.steps like \"90%\"")
    return int(text)


def _phase(cfg: PrecisionConfig, key: str, entry: Mapping, n_layers: int) -> tuple[str, Policy]:
    changes = [k for k in ("recipe", "default", "layers") if entry.get(k) is not None]
    if not changes:
        raise ConfigError(key, dict(entry), "a switch needs recipe: <name> and/or default: / layers: changes")
    base, base_key = cfg, "precision.layers"
    if entry.get("recipe") is not None:
        base = load_recipe(str(entry["recipe"]), f"{key}.recipe")
        base_key = f"{key}.recipe({base.name}).layers"
    defaults = dataclasses.asdict(base.default) if isinstance(base.default, OpDefaults) else dict(base.default)
    edits = entry.get("default") or {}
    if not isinstance(edits, Mapping):
        raise ConfigError(f"{key}.default", edits, "a mapping op -> spec, like precision.default")
    if "linear" in edits:  # a new fallback replaces every linear op the edit does not name itself
        defaults.update({op: None for op in (*LINEAR_OPS, LM_HEAD)})
    defaults.update(edits)
    policy = resolve_policy(defaults, [(base_key, base.layers), (f"{key}.layers", entry.get("layers") or {})],
                            n_layers)
    label = base.name + ("+changes" if entry.get("default") or entry.get("layers") else "")
    return label, policy


def build_plan(cfg: PrecisionConfig, n_layers: int, total_steps: int, tokens_per_step: int) -> PrecisionPlan:
    """Resolve every phase of the recipe now, so a bad switch fails before any device work."""
    phases = [Phase(0, cfg.name, resolve_recipe(cfg, n_layers))]
    for i, entry in enumerate(cfg.schedule or []):
        key = f"precision.schedule[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(key, entry, "a mapping like {at: \"90%\", recipe: bf16}")
        unknown = [k for k in entry if k not in SWITCH_KEYS]
        if unknown:
            raise ConfigError(f"{key}.{unknown[0]}", unknown[0], f"allowed keys: {', '.join(SWITCH_KEYS)}")
        start = _switch_step(key, entry, total_steps, tokens_per_step)
        if not phases[-1].start < start < total_steps:
            raise ConfigError(key, start, f"switch step must be after the previous one ({phases[-1].start}) and "
                                          f"before train.steps ({total_steps})")
        label, policy = _phase(cfg, key, entry, n_layers)
        phases.append(Phase(start, label, policy))
    return PrecisionPlan(phases)


class PrecisionController:
    """Keeps the model in the phase of the current step; reports precision metrics (see telemetry.py).

    The trainer calls `begin_step(step)` before each optimizer step and `end_step(...)`
    after it; nothing here is stored in checkpoints (the phase follows from the step).
    """

    def __init__(self, model: Any, plan: PrecisionPlan, telemetry: Any, logger: Any = None,
                 verbose: bool = True):
        self.model, self.plan, self.telemetry, self.logger, self.verbose = model, plan, telemetry, logger, verbose
        self.phase = -1
        self.apply(0)

    def apply(self, step: int) -> bool:
        """Put the model in the phase of `step`; True if that changed anything."""
        index = self.plan.index_at(step)
        if index == self.phase:
            return False
        policy = self.plan.phases[index].policy
        self.model.set_attention_specs(policy.attention)
        self.model.set_linear_specs(policy.linears, policy.lm_head)
        self.telemetry.set_policy(policy)
        announce = self.phase >= 0 or index > 0  # phase 0 at start-up is the recipe build_run prints
        self.phase = index
        if announce:
            self._announce(step)
        return True

    def _announce(self, step: int) -> None:
        phase = self.plan.phases[self.phase]
        if self.verbose:
            print(f"precision: step {step} runs phase {self.phase} ({phase.label}, from step {phase.start})\n"
                  f"{phase.policy.format_table()}", file=sys.stderr, flush=True)
        if self.logger is not None:
            self.logger.log_table(f"precision/phase{self.phase}", phase.policy.columns(), phase.policy.rows())

    def begin_step(self, step: int) -> None:
        from flamia_kernels.linear import set_quant_step

        self.apply(step)
        set_quant_step(self.model, step)  # random draws (NVFP4 SR, Hadamard) keyed to the step: resumes replay them
        self.telemetry.begin_step(step)

    def end_step(self, step: int, tokens_per_s: float | None) -> dict:
        """Metrics of the step just run: phase, FLOP split, mfu / mfu_weighted, quantization stats."""
        return {"precision/phase": self.phase, **self.telemetry.end_step(step, tokens_per_s)}
