"""LinearSpec: which number format each of a linear layer's three GEMMs uses.

A linear ``Y = X·Wᵀ`` costs three GEMMs per step, and each may run in its own format:

- ``fprop``: Y  = X  · Wᵀ   (contraction over in_features)
- ``dgrad``: dX = dY · W    (contraction over out_features)
- ``wgrad``: dW = dYᵀ · X   (contraction over tokens)

Formats are those of :data:`LINEAR_FORMATS`; docs/linear.md says what each one
quantizes, along which dim, with which scales. A spec is given as a `LinearSpec`,
one format for all three GEMMs (``"fp8"``), per GEMM (``"fprop=fp8,dgrad=fp8,wgrad=bf16"``,
parts in any order, missing parts bf16) or a mapping ``{"fprop": "fp8", ...}``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

LINEAR_FORMATS = ("bf16", "fp8", "fp8-block", "mxfp8", "nvfp4")
GEMMS = ("fprop", "dgrad", "wgrad")


def _check_format(fmt: object, gemm: str, shown: str = "") -> str:
    """`fmt` normalised to lower case, or ValueError naming the spec, the GEMM and the allowed formats."""
    text = fmt.strip().lower() if isinstance(fmt, str) else fmt
    if text not in LINEAR_FORMATS:
        raise ValueError(
            f"linear spec{' ' + shown if shown else ''}: bad format {fmt!r} for {gemm}; "
            f"allowed: {', '.join(LINEAR_FORMATS)}"
        )
    return text


@dataclass(frozen=True)
class LinearSpec:
    """Number format of each GEMM of a linear layer (see the module docstring)."""

    fprop: str = "bf16"  # Y = X·Wᵀ
    dgrad: str = "bf16"  # dX = dY·W
    wgrad: str = "bf16"  # dW = dYᵀ·X

    def __post_init__(self):
        for gemm in GEMMS:
            # Frozen dataclass: normalise through object.__setattr__ (e.g. "FP8" -> "fp8").
            object.__setattr__(self, gemm, _check_format(getattr(self, gemm), gemm))

    @property
    def name(self) -> str:
        """Canonical short string: ``"fp8"`` when all three agree, else ``"fprop=..,dgrad=..,wgrad=.."``."""
        if self.fprop == self.dgrad == self.wgrad:
            return self.fprop
        return ",".join(f"{g}={getattr(self, g)}" for g in GEMMS)

    @property
    def is_bf16(self) -> bool:
        """True if no GEMM is quantized (the layer runs plain F.linear)."""
        return self.fprop == self.dgrad == self.wgrad == "bf16"

    @property
    def emulated(self) -> bool:
        """True if any GEMM is MXFP8/NVFP4: exact format numerics without their FLOP rate on Hopper/CPU."""
        return any(getattr(self, g) in ("mxfp8", "nvfp4") for g in GEMMS)

    def __str__(self) -> str:
        return self.name

    @classmethod
    def parse(cls, value: LinearSpec | str | Mapping) -> LinearSpec:
        """LinearSpec from itself, a format name, ``"fprop=F,dgrad=F,wgrad=F"`` or a mapping.

        Raises ValueError naming the bad part and listing what is allowed.
        """
        if isinstance(value, LinearSpec):
            return value
        if isinstance(value, Mapping):
            return cls(**_fields_from_pairs(repr(dict(value)), [(str(k), v) for k, v in value.items()]))
        if not isinstance(value, str):
            raise ValueError(
                f"linear spec must be a string, a mapping or a LinearSpec, got {type(value).__name__}"
            )
        text = value.strip().lower()
        if "=" not in text:
            if text not in LINEAR_FORMATS:
                raise ValueError(
                    f"unknown linear spec {value!r}; allowed: one of {', '.join(LINEAR_FORMATS)} for all "
                    f"GEMMs, or per GEMM 'fprop=F,dgrad=F,wgrad=F'"
                )
            return cls(text, text, text)
        pairs = []
        for part in text.split(","):
            key, sep, fmt = (s.strip() for s in part.partition("="))
            if not sep:
                raise ValueError(
                    f"linear spec {value!r}: bad part {part.strip()!r}; expected gemm=format with gemm one "
                    f"of {', '.join(GEMMS)}"
                )
            pairs.append((key, fmt))
        return cls(**_fields_from_pairs(repr(value), pairs))


def _fields_from_pairs(shown: str, pairs: list[tuple[str, object]]) -> dict[str, str]:
    """{gemm: format} from (key, format) pairs; ValueError on an unknown or repeated GEMM or format."""
    out: dict[str, str] = {}
    names = {f.name for f in fields(LinearSpec)}
    for key, fmt in pairs:
        key = key.strip().lower()
        if key not in names:
            raise ValueError(f"linear spec {shown}: unknown GEMM {key!r}; allowed: {', '.join(GEMMS)}")
        if key in out:
            raise ValueError(f"linear spec {shown}: GEMM {key!r} given twice")
        out[key] = _check_format(fmt, key, shown)
    return out
