r"""RoPE frequencies and the context-extension rescalings: ABF, linear, NTK-aware, YaRN.

A RoPE table is e^{i·m·ω_j} for positions m and pair index j < Dh/2, with
ω_j = θ^(-2j/Dh). Context extension changes the ω_j (and, for YaRN, the magnitude):

```
none    ω_j = θ^(-2j/Dh)                          plain RoPE; "ABF" is just a larger θ
linear  ω_j / s                                   position interpolation: position m acts as m/s
ntk     θ' = θ · s^(Dh/(Dh-2)), ω_j from θ'        highest frequency kept, lowest one divided by s
yarn    per pair: ω_j where the pair turns many times in the original context (j < low),
        ω_j / s where it turns less than once (j > high), a linear ramp between;
        magnitude √t = 0.1·ln(s) + 1, so q·k logits grow by t (the paper's temperature)
```

with s the scaling factor and low/high the pair indices that complete `beta_fast` /
`beta_slow` rotations over `original_seq_len` tokens (YaRN, Peng et al. 2023; the
same formulas as Hugging Face's `rope_type="yarn"`). The model multiplies q and k by
the complex table, so the YaRN magnitude scales both and the logits by its square.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from flamia_train.errors import ConfigError

ROPE_SCALINGS = ("none", "linear", "ntk", "yarn")


@dataclass(frozen=True)
class RopeScaling:
    """How RoPE frequencies are rescaled for context extension; ``none`` = plain RoPE."""

    method: str = "none"  # none | linear | ntk | yarn
    factor: float = 1.0  # s: how many times longer than original_seq_len the context gets (>= 1)
    original_seq_len: int = 0  # yarn: the context the model was trained at (> 0 for yarn)
    beta_fast: float = 32.0  # yarn: pairs with at least this many rotations keep their frequency
    beta_slow: float = 1.0  # yarn: pairs with at most this many rotations are fully interpolated

    def check(self, key: str = "rope_scaling") -> RopeScaling:
        """Return self, or raise ConfigError naming ``key``'s bad part."""
        if self.method not in ROPE_SCALINGS:
            raise ConfigError(key, self.method, f"one of {', '.join(ROPE_SCALINGS)}")
        if not self.factor >= 1.0:
            raise ConfigError(f"{key} factor", self.factor, "a scaling factor >= 1")
        if self.method == "yarn":
            if self.original_seq_len <= 0:
                raise ConfigError(f"{key} original_seq_len", self.original_seq_len,
                                  "the positive context length the model was trained at (yarn)")
            if not 0 < self.beta_slow < self.beta_fast:
                raise ConfigError(f"{key} beta_slow/beta_fast", (self.beta_slow, self.beta_fast),
                                  "0 < beta_slow < beta_fast")
        return self


def _yarn_ramp(scaling: RopeScaling, head_dim: int, theta: float) -> torch.Tensor:
    """Weight of the *interpolated* frequency per pair (0 = keep ω_j, 1 = ω_j / s), float64 (Dh/2,)."""

    def pair_index(rotations: float) -> float:
        # Pair j turns original_seq_len·ω_j / 2π times over the original context; solve for j.
        return head_dim * math.log(scaling.original_seq_len / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(pair_index(scaling.beta_fast)), 0)
    high = min(math.ceil(pair_index(scaling.beta_slow)), head_dim - 1)
    if low == high:
        high += 0.001  # the reference implementation's guard against a zero-width ramp
    j = torch.arange(head_dim // 2, dtype=torch.float64)
    return ((j - low) / (high - low)).clamp(0.0, 1.0)


def inv_frequencies(head_dim: int, theta: float, scaling: RopeScaling | None = None) -> torch.Tensor:
    """ω_j for j < head_dim/2 as float64 on the CPU, after ``scaling`` (module docstring)."""
    scaling = scaling or RopeScaling()
    if scaling.method == "ntk" and head_dim > 2:
        theta = theta * scaling.factor ** (head_dim / (head_dim - 2))
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if scaling.method == "linear":
        return inv / scaling.factor
    if scaling.method == "yarn":
        ramp = _yarn_ramp(scaling, head_dim, theta)
        return inv * (1.0 - ramp) + (inv / scaling.factor) * ramp
    return inv


def magnitude(scaling: RopeScaling | None) -> float:
    """|table entry|: √t = 0.1·ln(s) + 1 for YaRN (applied to q and k alike), else 1."""
    if scaling is None or scaling.method != "yarn" or scaling.factor <= 1.0:
        return 1.0
    return 0.1 * math.log(scaling.factor) + 1.0


def rope_table(seq_len: int, head_dim: int, theta: float, device: torch.device,
               scaling: RopeScaling | None = None) -> torch.Tensor:
    """complex64 (seq_len, head_dim/2): magnitude · e^{i·m·ω_j}, angles computed in float64."""
    inv = inv_frequencies(head_dim, theta, scaling).to(device)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float64), inv)
    radius = torch.full_like(angles, magnitude(scaling))
    return torch.polar(radius, angles).to(torch.complex64)
