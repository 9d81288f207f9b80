"""Precision recipes: a default op spec plus ordered per-layer overrides, resolved to one spec per layer.

A recipe is the `precision:` config node. Layer overrides live in `precision.layers`, a
mapping from a *layer selector* to an attention spec string. Selectors come in two
spellings, because Hydra's command-line grammar does not allow `:` or `-` inside keys:

| meaning                 | command-line key (Hydra-friendly) | rule string (YAML / quoted list) |
| ----------------------- | --------------------------------- | -------------------------------- |
| layer 3                 | `3` or `L3`                       | `3`                              |
| last layer              | `Lm1` (m = minus)                 | `-1`                             |
| layers 0..3 (inclusive) | `L0_3`                            | `0-3`                            |
| first 2 layers          | `first2`                          | `first:2`                        |
| last 2 layers           | `last2`                           | `last:2`                         |
| last 15% of layers      | `last15pct`                       | `last:15%`                       |

Later overrides win (mapping order = the order they were written; command-line
additions come after the YAML's). Every selector must name layers that exist.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from flamia_train.errors import ConfigError

LINEAR_FORMATS = ("bf16",)  # quantized linears arrive with the precision-recipes work (issue 4)


@dataclass
class OpDefaults:
    """The spec every layer gets unless an override says otherwise."""

    attention: str = "bf16"  # FLAMIA attention spec: preset name or "qk=..,pv=..,do=..,ds=.."
    linear: str = "bf16"  # linear-layer GEMM format (only bf16 until quantized linears land)


@dataclass
class PrecisionConfig:
    """A precision recipe (configs/precision/*.yaml)."""

    name: str = "bf16"  # recipe name, logged and stored in checkpoints
    default: OpDefaults = field(default_factory=OpDefaults)  # spec of every layer before overrides
    layers: dict[str, Any] = field(default_factory=dict)  # selector -> attention spec (see module doc)


_PATTERNS = [
    (re.compile(r"^L?(\d+)$"), "index"),
    (re.compile(r"^(?:Lm|-)(\d+)$"), "negative"),
    (re.compile(r"^L?(\d+)(?:_|-)(\d+)$"), "range"),
    (re.compile(r"^(first|last):?(\d+)$"), "count"),
    (re.compile(r"^(first|last):?(\d+(?:\.\d+)?)(?:%|pct)$"), "fraction"),
]


def select_layers(selector: str, n_layers: int) -> list[int]:
    """Layer indices named by `selector` (see the module docstring), in increasing order."""
    key = f"precision.layers.{selector}"
    text = str(selector).strip()
    for pattern, kind in _PATTERNS:
        m = pattern.match(text)
        if not m:
            continue
        if kind == "index":
            idx = [int(m.group(1))]
        elif kind == "negative":
            idx = [n_layers - int(m.group(1))]
        elif kind == "range":
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo > hi:
                raise ConfigError(key, selector, f"a range must run low to high (got {lo} > {hi})")
            idx = list(range(lo, hi + 1))
        elif kind == "count":
            count = int(m.group(2))
            if not 1 <= count <= n_layers:
                raise ConfigError(key, selector, f"count must be in 1..{n_layers} (the model's layers)")
            idx = list(range(count)) if m.group(1) == "first" else list(range(n_layers - count, n_layers))
        else:
            pct = float(m.group(2))
            if not 0 < pct <= 100:
                raise ConfigError(key, selector, "a percentage must be in (0, 100]")
            count = max(1, math.ceil(n_layers * pct / 100))
            idx = list(range(count)) if m.group(1) == "first" else list(range(n_layers - count, n_layers))
        bad = [i for i in idx if not 0 <= i < n_layers]
        if bad:
            raise ConfigError(key, selector, f"names layer {bad[0]}, but the model has layers 0..{n_layers - 1}")
        return idx
    raise ConfigError(
        key, selector, "unknown layer selector; allowed: N, LN, LmN, -N, LA_B, A-B, firstN, first:N, "
        "lastN, last:N, lastNpct, last:N%",
    )


def _parse_attention(key: str, value: Any):
    from flamia_kernels import AttentionSpec

    if isinstance(value, dict) or hasattr(value, "keys"):
        unknown = set(value.keys()) - {"attention", "linear"}
        if unknown:
            raise ConfigError(f"{key}.{sorted(unknown)[0]}", value, "allowed ops: attention, linear")
        if "linear" in value:
            _check_linear(f"{key}.linear", value["linear"])
        value = value.get("attention")
        if value is None:
            return None
    try:
        return AttentionSpec.parse(str(value))
    except ValueError as err:
        raise ConfigError(key, value, str(err)) from None


def _check_linear(key: str, value: Any) -> None:
    if str(value) not in LINEAR_FORMATS:
        raise ConfigError(key, value, f"linear formats available now: {', '.join(LINEAR_FORMATS)}")


def resolve_attention_specs(cfg: PrecisionConfig, n_layers: int) -> list:
    """One `AttentionSpec` per layer: the default, then each override in order (later wins)."""
    _check_linear("precision.default.linear", cfg.default.linear)
    default = _parse_attention("precision.default.attention", cfg.default.attention)
    specs = [default] * n_layers
    for selector, value in (cfg.layers or {}).items():
        spec = _parse_attention(f"precision.layers.{selector}", value)
        for i in select_layers(str(selector), n_layers):
            if spec is not None:
                specs[i] = spec
    return specs


def format_table(specs: list) -> str:
    """The resolved layer × op table printed at start-up."""
    rows = [f"{'layer':>5}  {'attention':<28} linear"]
    rows += [f"{i:>5}  {s.name:<28} bf16" for i, s in enumerate(specs)]
    return "\n".join(rows)
