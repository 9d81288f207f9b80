"""AttentionSpec: which number format each operand of FLAMIA attention uses.

Four operands, each one of ``bf16``, ``fp8``, ``mxfp8``, ``nvfp4``:

- ``qk``: Q and K in QKᵀ, and the same quantized Q, K reused in dQ = dS·K, dK = dSᵀ·Q.
- ``pv``: P and V in P·V, and the same quantized V in dP = dO·Vᵀ (and P again in dV = Pᵀ·dO; with pv and do
  both fp8, P·s_dO re-quantized per key row, so that dV is an FP8 product: `AttentionSpec.fp8_dv`).
- ``do``: dO in dV and dP.
- ``ds``: dS in dK = dSᵀ·Q, and in dQ = dS·K unless ``dsk`` is fp8.

and one product:

- ``dsk``: dQ = dS·K. ``bf16``: dS in ``ds``'s format against K's ``qk`` bytes. ``fp8``: one FP8 product,
  E4M3(dS·s_k/ρ) against K's E4M3 bytes, ρ a power of two per query from a bound on |dS·s_k| known before the
  backward (`reference.dq_row_scale`: causally safe, no reduction in the kernels). It needs qk, pv and do fp8 (the
  bound is over E4M3 bytes of dO and V) and ds bf16 (dK keeps bf16 dS). Half the bytes of the dS the fast path
  stores for dQ and an FP8 tensor-core product; ~7% more dQ error (docs/kernels.md, "Choosing the presets"). The
  preset ``fp8`` has it since session 31; ``fp8-bf16dq`` is ``fp8`` without it (bf16 dS in dQ as in dK).

A spec is given as an `AttentionSpec`, a preset name, or
``"qk=fp8,pv=fp8,do=fp8,ds=bf16,dsk=fp8"`` (parts in any order; missing parts are bf16).
The presets and the measurements behind them are in docs/kernels.md.
"""
from __future__ import annotations

from dataclasses import dataclass

FORMATS = ("bf16", "fp8", "mxfp8", "nvfp4")
OPERANDS = ("qk", "pv", "do", "ds")
# The parts of a spec: the operands, then the dQ product's own format (bf16 or fp8, see the module docstring)
PARTS = (*OPERANDS, "dsk")
DSK_FORMATS = ("bf16", "fp8")


def part_formats(part: str) -> tuple[str, ...]:
    """The formats a spec part allows: every format for an operand, bf16 or fp8 for dsk."""
    return DSK_FORMATS if part == "dsk" else FORMATS

# Token block every scale block and the kernel tile align to (BLOCK_M = BLOCK_N): 128 is the
# measured-fast tile on the H200 (FLAMIA.md). Sequence lengths must be a multiple of it.
SEQ_BLOCK = 128
# Head dims the Triton kernels are built for (a power of two, a whole number of NVFP4/MX blocks).
SUPPORTED_HEAD_DIMS = (64, 128)


@dataclass(frozen=True)
class AttentionSpec:
    """Number format of each attention operand (see the module docstring)."""

    qk: str = "bf16"
    pv: str = "bf16"
    do: str = "bf16"
    ds: str = "bf16"
    dsk: str = "bf16"

    def __post_init__(self):
        for part in PARTS:
            fmt = getattr(self, part)
            if fmt not in part_formats(part):
                what = "operand" if part in OPERANDS else "part (the dQ = dS·K product)"
                raise ValueError(f"attention spec: {what} {part}={fmt!r} is not allowed; allowed: "
                                 f"{', '.join(part_formats(part))}")
        if self.dsk == "fp8" and (self.qk, self.pv, self.do, self.ds) != ("fp8", "fp8", "fp8", "bf16"):
            raise ValueError(f"attention spec: dsk=fp8 (dQ as an FP8 product under per-query bound scales) needs "
                             f"qk=fp8, pv=fp8, do=fp8 and ds=bf16, got qk={self.qk}, pv={self.pv}, do={self.do}, "
                             f"ds={self.ds}; set dsk=bf16 for any other operand formats")

    @property
    def name(self) -> str:
        """Canonical short string: the preset name if it is one, else ``qk=..,pv=..,do=..,ds=..`` (and ``,dsk=fp8``
        where dQ is an FP8 product: without it a name reads as it did before dsk existed)."""
        for preset, spec in PRESETS.items():
            if spec == self:
                return preset
        parts = OPERANDS if self.dsk == "bf16" else PARTS
        return ",".join(f"{op}={getattr(self, op)}" for op in parts)

    @property
    def is_bf16(self) -> bool:
        """True if nothing is quantized (runs on SDPA)."""
        return all(getattr(self, op) == "bf16" for op in PARTS)

    @property
    def fp8_dv(self) -> bool:
        """True if the backward's dV = Pᵀ·dO runs as an FP8 product (P and dO both fp8): P·s_dO re-quantized
        per key row (`reference.dv_row_scale`), against dO's own per-token bytes."""
        return self.pv == "fp8" and self.do == "fp8"

    @property
    def emulated(self) -> bool:
        """True if any operand is MXFP8/NVFP4: exact format numerics, bf16 tensor-core speed on Hopper."""
        return any(getattr(self, op) in ("mxfp8", "nvfp4") for op in OPERANDS)

    def __str__(self) -> str:
        return self.name

    @classmethod
    def parse(cls, spec: AttentionSpec | str) -> AttentionSpec:
        """AttentionSpec from itself, a preset name or ``"qk=fp8,pv=fp8,do=fp8,ds=bf16,dsk=fp8"``.

        Raises ValueError naming the bad part and listing what is allowed.
        """
        if isinstance(spec, AttentionSpec):
            return spec
        if not isinstance(spec, str):
            raise ValueError(f"attention spec must be a string or AttentionSpec, got {type(spec).__name__}")
        text = spec.strip().lower()
        if text in PRESETS:
            return PRESETS[text]
        if "=" not in text:
            raise ValueError(
                f"unknown attention spec {spec!r}; allowed presets: {', '.join(PRESETS)}, "
                f"or per operand 'qk=F,pv=F,do=F,ds=F' with F one of {', '.join(FORMATS)} (and dsk=bf16 or fp8)"
            )
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, sep, fmt = (s.strip() for s in part.partition("="))
            if not sep or key not in PARTS:
                raise ValueError(
                    f"attention spec {spec!r}: bad part {part.strip()!r}; "
                    f"allowed parts: {', '.join(PARTS)} (as part=format)"
                )
            if key in fields:
                raise ValueError(f"attention spec {spec!r}: part {key!r} given twice")
            allowed = part_formats(key)
            if fmt not in allowed:
                raise ValueError(
                    f"attention spec {spec!r}: bad format {fmt!r} in part {part.strip()!r}; "
                    f"allowed: {', '.join(allowed)}"
                )
            fields[key] = fmt
        try:
            return cls(**fields)
        except ValueError as err:  # an inconsistent combination: say which string it came from
            raise ValueError(f"{err} (in {spec!r})") from None


# Presets. dS stays bf16 in dK = dSᵀ·Q in every preset (its error compounds through the softmax Jacobian). In dQ =
# dS·K, `fp8` takes dS in FP8 under bound scales (dsk=fp8): the fastest fp8 backward, ~7% more dQ error (cosine to
# fp32 0.9973 against 0.9976 at S = 4096), and at loss parity in training — four pairs of gpt-125m runs against bf16
# dS, held-out loss at the end −1.42%, −0.16% (800 steps, one epoch, session 31), −0.33%, +2.41% (1,000 steps,
# session 28), within the seeds' own spread. `fp8-bf16dq` keeps bf16 dS in dQ too (the `fp8` of sessions 28–30).
# The figures that chose these are in docs/kernels.md, "Choosing the presets".
PRESETS: dict[str, AttentionSpec] = {
    "bf16": AttentionSpec(),
    "fp8": AttentionSpec(qk="fp8", pv="fp8", do="fp8", ds="bf16", dsk="fp8"),
    "fp8-bf16dq": AttentionSpec(qk="fp8", pv="fp8", do="fp8", ds="bf16"),
    "mxfp8": AttentionSpec(qk="mxfp8", pv="mxfp8", do="mxfp8", ds="bf16"),
    "nvfp4": AttentionSpec(qk="nvfp4", pv="nvfp4", do="nvfp4", ds="bf16"),
    "nvfp4-fp8": AttentionSpec(qk="fp8", pv="nvfp4", do="fp8", ds="bf16"),
}
