"""Precision recipes: a default spec per op plus ordered per-layer overrides, resolved to a layer × op table.

A recipe is the `precision:` config node (configs/precision/*.yaml). It names a spec for
every *op* of a transformer block, and for the LM head:

| op         | modules                 | spec                                                      |
| ---------- | ----------------------- | --------------------------------------------------------- |
| `attention`| FLAMIA attention        | AttentionSpec: preset or `qk=..,pv=..,do=..,ds=..,dsk=..` |
| `qkv`      | wq, wk, wv              | LinearSpec: format, `fprop=..,dgrad=..,wgrad=..`, mapping |
| `out`      | wo                      | LinearSpec                                                |
| `mlp_up`   | w_gate, w_up            | LinearSpec                                                |
| `mlp_down` | w_down                  | LinearSpec                                                |
| `lm_head`  | output (not per layer)  | LinearSpec, only in `default`                             |

`default.linear` is the fallback of every linear op the default does not name.
`layers` maps a *layer selector* to an override, applied in order (later wins). An
override is one of:

- a spec string: it sets every op it is a spec of. `bf16`, `fp8`, `mxfp8` and `nvfp4` are
  both attention and linear formats, so `last2: bf16` puts the whole layer in bf16;
  `nvfp4-fp8` or `qk=fp8,...` set attention only; `fp8-block` or `fprop=fp8,...` the linears only;
- a mapping op -> spec (`linear` = all four linears), e.g. `{attention: fp8, mlp_down: bf16}`;
- a mapping op -> {part: format} that changes single GEMMs or operands and keeps the rest,
  e.g. `{mlp_down: {wgrad: bf16}}` (command line `+precision.layers.L0_3.mlp_down.wgrad=bf16`).

Selectors come in two spellings, because Hydra's command-line grammar does not allow `:`,
`%` or a leading digit followed by `-` inside keys:

| meaning                 | command-line key (Hydra-friendly) | rule string (YAML)  |
| ----------------------- | --------------------------------- | ------------------- |
| layer 3                 | `3` or `L3`                       | `3`                 |
| last layer              | `Lm1` (m = minus)                 | `-1`                |
| layers 0..3 (inclusive) | `L0_3` or `L0-3`                  | `0-3`               |
| first 2 layers          | `first2`                          | `first:2`           |
| last 2 layers           | `last2`                           | `last:2`            |
| last 15% of layers      | `last15pct`                       | `last:15%`          |

Every selector must name layers that exist. *Contradiction* (a ConfigError): one override,
or one selector written twice in two spellings (`last2` and `last:2`), setting the same GEMM or
operand to two different values. Mapping order between two spellings of one key says nothing
the user chose, so there is no "later" to win; distinct selectors that overlap are fine.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flamia_train.errors import ConfigError

ATTENTION = "attention"
LINEAR_OPS = ("qkv", "out", "mlp_up", "mlp_down")  # per-layer linears; lm_head is the model's last
LAYER_OPS = (ATTENTION, *LINEAR_OPS)
LM_HEAD = "lm_head"


@dataclass
class OpDefaults:
    """The spec every layer gets unless an override says otherwise."""

    attention: str = "bf16"  # FLAMIA attention spec: preset name or "qk=..,pv=..,do=..,ds=.."
    linear: Any = "bf16"  # LinearSpec of every linear op left null below (including lm_head)
    qkv: Any = None  # wq/wk/wv: "fp8" | "fprop=..,dgrad=..,wgrad=.." | {fprop: .., dgrad: .., wgrad: ..}
    out: Any = None  # wo (attention output projection)
    mlp_up: Any = None  # w_gate and w_up
    mlp_down: Any = None  # w_down
    lm_head: Any = None  # the output projection (once, not per layer)


@dataclass
class PrecisionConfig:
    """A precision recipe (configs/precision/*.yaml); docs/precision.md has the whole story."""

    name: str = "bf16"  # recipe name, logged and stored in checkpoints
    default: OpDefaults = field(default_factory=OpDefaults)  # spec of every op before overrides
    layers: dict[str, Any] = field(default_factory=dict)  # selector -> override (see module doc)
    schedule: list[Any] = field(default_factory=list)  # [{at: step | "90%", or tokens: N; recipe/default/layers}]
    telemetry_interval: int = 0  # log amax/saturation/underflow of every quantized linear every N steps; 0 = off


def _kernels():
    # Imported at call time so that composing a config never imports Triton.
    from flamia_kernels import AttentionSpec
    from flamia_kernels.linear import LINEAR_FORMATS, LinearSpec

    return AttentionSpec, LinearSpec, LINEAR_FORMATS


# ---------------------------------------------------------------------- layer selectors

_PATTERNS = [
    (re.compile(r"^L?(\d+)$"), "index"),
    (re.compile(r"^(?:Lm|-)(\d+)$"), "negative"),
    (re.compile(r"^L?(\d+)(?:_|-)(\d+)$"), "range"),
    (re.compile(r"^(first|last):?(\d+)$"), "count"),
    (re.compile(r"^(first|last):?(\d+(?:\.\d+)?)(?:%|pct)$"), "fraction"),
]
_SELECTOR_HELP = ("unknown layer selector; allowed: N, LN, LmN, -N, LA_B, A-B, firstN, first:N, "
                  "lastN, last:N, lastNpct, last:N%")


def canonical_selector(selector: str) -> tuple:
    """The selector independent of its spelling: `last2` and `last:2` give the same tuple."""
    text = str(selector).strip()
    for pattern, kind in _PATTERNS:
        m = pattern.match(text)
        if m:
            groups = tuple(g if g in ("first", "last") else float(g) for g in m.groups())
            return (kind, *groups)
    raise ConfigError(f"precision.layers.{selector}", selector, _SELECTOR_HELP)


def select_layers(selector: str, n_layers: int, key: str | None = None) -> list[int]:
    """Layer indices named by `selector` (see the module docstring), in increasing order."""
    key = key or f"precision.layers.{selector}"
    kind, *args = canonical_selector(selector)
    if kind == "index":
        idx = [int(args[0])]
    elif kind == "negative":
        idx = [n_layers - int(args[0])]
    elif kind == "range":
        lo, hi = int(args[0]), int(args[1])
        if lo > hi:
            raise ConfigError(key, selector, f"a range must run low to high (got {lo} > {hi})")
        idx = list(range(lo, hi + 1))
    else:
        end, amount = args
        if kind == "count":
            count = int(amount)
            if not 1 <= count <= n_layers:
                raise ConfigError(key, selector, f"count must be in 1..{n_layers} (the model's layers)")
        else:
            if not 0 < amount <= 100:
                raise ConfigError(key, selector, "a percentage must be in (0, 100]")
            count = max(1, math.ceil(n_layers * amount / 100))
        idx = list(range(count)) if end == "first" else list(range(n_layers - count, n_layers))
    bad = [i for i in idx if not 0 <= i < n_layers]
    if bad:
        raise ConfigError(key, selector, f"names layer {bad[0]}, but the model has layers 0..{n_layers - 1}")
    return idx


# ---------------------------------------------------------------------- parsing one spec

def parse_attention(key: str, value: Any):
    """AttentionSpec of `value`, or ConfigError naming `key`."""
    attention_spec, _, _ = _kernels()
    try:
        return attention_spec.parse(str(value))
    except ValueError as err:
        raise ConfigError(key, value, str(err)) from None


def parse_linear(key: str, value: Any):
    """LinearSpec of a format, a "fprop=..,dgrad=..,wgrad=.." string or a mapping; ConfigError naming `key`."""
    _, linear_spec, _ = _kernels()
    try:
        return linear_spec.parse(dict(value) if isinstance(value, Mapping) else str(value))
    except ValueError as err:
        raise ConfigError(key, value, str(err)) from None


def _is_mapping(value: Any) -> bool:
    return isinstance(value, Mapping) or hasattr(value, "keys")


# An assignment sets one op to a whole spec (part None) or one GEMM / operand of it to a format.
Assignment = tuple[str, "str | None", Any]


def _parts(op: str) -> tuple[str, ...]:
    attention_spec, linear_spec, _ = _kernels()
    cls = attention_spec if op == ATTENTION else linear_spec
    return tuple(f.name for f in dataclasses.fields(cls))


def _op_assignments(key: str, op: str, value: Any) -> list[Assignment]:
    """The assignments of `op: value` inside an override (value a spec or a {part: format} mapping)."""
    if not _is_mapping(value):
        spec = parse_attention(key, value) if op == ATTENTION else parse_linear(key, value)
        return [(op, None, spec)]
    _, _, linear_formats = _kernels()
    from flamia_kernels.spec import part_formats

    out = []
    for part, fmt in value.items():
        if part not in _parts(op):
            raise ConfigError(f"{key}.{part}", part, f"{op} has parts: {', '.join(_parts(op))}")
        fmt = str(fmt).strip().lower()
        formats = part_formats(part) if op == ATTENTION else linear_formats
        if fmt not in formats:
            raise ConfigError(f"{key}.{part}", fmt, f"unknown format; allowed for {op}: {', '.join(formats)}")
        out.append((op, part, fmt))
    return out


def override_assignments(key: str, value: Any) -> list[Assignment]:
    """Every assignment of one per-layer override (see the module docstring for the three forms)."""
    if not _is_mapping(value):
        attention_spec, linear_spec, _ = _kernels()
        out: list[Assignment] = []
        try:
            out.append((ATTENTION, None, attention_spec.parse(str(value))))
        except ValueError:
            pass  # not an attention spec: maybe a linear-only one (fp8-block, fprop=...)
        try:
            spec = linear_spec.parse(str(value))
            out += [(op, None, spec) for op in LINEAR_OPS]
        except ValueError:
            pass
        if not out:
            raise ConfigError(key, value, "neither an attention spec (bf16, fp8, fp8-bf16dq, mxfp8, nvfp4, nvfp4-fp8, "
                                          "qk=..,pv=..,do=..,ds=..,dsk=..) nor a linear spec (bf16, fp8, fp8-block, "
                                          "mxfp8, nvfp4, fprop=..,dgrad=..,wgrad=..)")
        return out
    out = []
    for op, spec in value.items():
        if op == LM_HEAD:
            raise ConfigError(f"{key}.{op}", spec, "lm_head is not per layer; set precision.default.lm_head")
        if op == "linear":
            for linear_op in LINEAR_OPS:
                out += _op_assignments(f"{key}.linear", linear_op, spec)
        elif op in LAYER_OPS:
            out += _op_assignments(f"{key}.{op}", op, spec)
        else:
            raise ConfigError(f"{key}.{op}", op, f"unknown op; allowed: {', '.join(LAYER_OPS)}, linear")
    return out


def _elementary(assignments: list[Assignment]) -> dict[tuple[str, str], list[str]]:
    """{(op, part): [format, ...]}: every format each GEMM / operand is given, in order."""
    out = {}
    for op, part, value in assignments:
        for p in _parts(op) if part is None else (part,):
            fmt = getattr(value, p) if part is None else value
            out.setdefault((op, p), []).append(fmt)
    return out


def _check_contradiction(key: str, assignments: list[Assignment], earlier: dict | None = None) -> dict:
    """Raise if the same GEMM/operand gets two different formats; return the elementary map."""
    seen = {k: list(v) for k, v in (earlier or {}).items()}
    for k, fmts in _elementary(assignments).items():
        seen.setdefault(k, []).extend(fmts)
    for (op, part), fmts in seen.items():
        if len(set(fmts)) > 1:
            raise ConfigError(key, f"{op}.{part} = {' and '.join(dict.fromkeys(fmts))}",
                              "contradiction: one override (or one selector in two spellings) sets the same "
                              "GEMM/operand to two formats; write it once, or use distinct selectors (later wins)")
    return seen


# ---------------------------------------------------------------------- the resolved policy

@dataclass
class Policy:
    """The resolved recipe: one spec per (layer, op), and the LM head's."""

    attention: list  # [n_layers] AttentionSpec
    linears: list[dict]  # [n_layers] {op: LinearSpec} for op in LINEAR_OPS
    lm_head: Any  # LinearSpec

    @property
    def n_layers(self) -> int:
        return len(self.attention)

    def columns(self) -> list[str]:
        return ["layer", *LAYER_OPS]

    def rows(self) -> list[list[str]]:
        """The table as rows of names: one per layer, then `lm_head` (its spec in the qkv column)."""
        rows = [[str(i), self.attention[i].name, *(self.linears[i][op].name for op in LINEAR_OPS)]
                for i in range(self.n_layers)]
        return rows + [[LM_HEAD, "-", self.lm_head.name, "-", "-", "-"]]

    def format_table(self) -> str:
        """The resolved layer × op table printed at start-up."""
        rows = [self.columns(), *self.rows()]
        widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
        return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)

    def formats(self) -> set[str]:
        """Every format any GEMM or operand uses."""
        out = {getattr(s, p) for s in self.attention for p in _parts(ATTENTION)}
        specs = [*(d[op] for d in self.linears for op in LINEAR_OPS), self.lm_head]
        return out | {getattr(s, p) for s in specs for p in _parts("qkv")}


def _default_linear(defaults: Any, op: str, prefix: str):
    value = defaults.get(op) if isinstance(defaults, Mapping) else getattr(defaults, op, None)
    if value is None:
        return parse_linear(f"{prefix}.linear", _get(defaults, "linear", "bf16"))
    return parse_linear(f"{prefix}.{op}", value)


def _get(obj: Any, name: str, fallback: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, fallback)
    return getattr(obj, name, fallback)


def resolve_policy(defaults: Any, layers_levels: list[tuple[str, Mapping]], n_layers: int) -> Policy:
    """The layer × op table: `defaults`, then each level's overrides in order (later wins).

    `defaults` is an OpDefaults or a mapping of its fields; `layers_levels` a list of
    (key prefix, {selector: override}) pairs, e.g. [("precision.layers", cfg.layers)].
    Contradictions are looked for inside each level (see the module docstring).
    """
    prefix = "precision.default"
    if isinstance(defaults, Mapping):
        unknown = set(defaults) - {f.name for f in dataclasses.fields(OpDefaults)}
        if unknown:
            name = sorted(unknown)[0]
            raise ConfigError(f"{prefix}.{name}", name, f"unknown op; allowed: {', '.join(LAYER_OPS)}, linear, "
                                                        f"{LM_HEAD}")
    attention = parse_attention(f"{prefix}.attention", _get(defaults, "attention", "bf16"))
    table = [{ATTENTION: attention, **{op: _default_linear(defaults, op, prefix) for op in LINEAR_OPS}}
             for _ in range(n_layers)]
    lm_head = _default_linear(defaults, LM_HEAD, prefix)
    for level_key, layers in layers_levels:
        by_selector: dict[tuple, dict] = {}
        for selector, value in (layers or {}).items():
            key = f"{level_key}.{selector}"
            assignments = override_assignments(key, value)
            canon = canonical_selector(selector)
            by_selector[canon] = _check_contradiction(key, assignments, by_selector.get(canon))
            for i in select_layers(str(selector), n_layers, key):
                for op, part, spec in assignments:
                    table[i][op] = spec if part is None else _with_part(key, table[i][op], op, assignments, i)
    return Policy(attention=[row[ATTENTION] for row in table],
                  linears=[{op: row[op] for op in LINEAR_OPS} for row in table], lm_head=lm_head)


def _with_part(key: str, spec: Any, op: str, assignments: list[Assignment], layer: int) -> Any:
    """`spec` with every part this override gives `op` (all at once: `{attention: {pv: nvfp4, dsk: bf16}}` is
    valid where pv alone is not), or ConfigError naming the override where the result is not a spec."""
    parts = {part: fmt for o, part, fmt in assignments if o == op and part is not None}
    try:
        return dataclasses.replace(spec, **parts)
    except ValueError as err:
        raise ConfigError(key, ",".join(f"{op}.{p}={f}" for p, f in parts.items()),
                          f"layer {layer}'s {op} would be {spec.name} with these parts: {err}") from None


def resolve_recipe(cfg: PrecisionConfig, n_layers: int) -> Policy:
    """The policy of a recipe without its schedule (the phase that starts at step 0)."""
    return resolve_policy(cfg.default, [("precision.layers", cfg.layers)], n_layers)


def resolve_attention_specs(cfg: PrecisionConfig, n_layers: int) -> list:
    """One AttentionSpec per layer of the recipe's first phase."""
    return resolve_recipe(cfg, n_layers).attention
