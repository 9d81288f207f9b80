"""The launch-config syntax the kernel scripts share (scripts/bench_attention.py's --fwd-configs /
--bwd-configs, scripts/kernel_registers.py's --configs). Imports nothing of the kernels, so a
script may parse its arguments before it decides how the kernels are built.

    WARPSxSTAGES[xSUB] then any of
      :fresh   forward: a fresh P·V product per tile (CHAIN off)
      :bptr    forward: block-pointer K/V loads off the diagonal (BPTR)
      :atomic / :kernel   backward: dQ summed atomically in the dK/dV kernel, or its own kernel
      :half    backward: dK/dV programs of 64 keys (bn = 64)
      :dkdv / :dq         backward: run one kernel only
"""

from __future__ import annotations

import argparse

_FLAGS = {"fresh": ("CHAIN", False), "bptr": ("BPTR", True), "half": ("bn", 64), "atomic": ("dq", "atomic"),
          "kernel": ("dq", "kernel"), "dkdv": ("which", "dkdv"), "dq": ("which", "dq")}


def parse_config(text: str) -> dict:
    """"8x2x32:atomic" -> {"num_warps": 8, "num_stages": 2, "sub": 32, "dq": "atomic"}."""
    spec, *extras = text.split(":")
    parts = spec.split("x")
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"config {text!r}: WARPSxSTAGES[xSUB][:option...], e.g. 8x2x32")
    cfg = {"num_warps": int(parts[0]), "num_stages": int(parts[1])}
    if len(parts) == 3:
        cfg["sub"] = int(parts[2])
    for extra in extras:
        if extra not in _FLAGS:
            raise argparse.ArgumentTypeError(
                f"config {text!r}: unknown part {extra!r}; allowed {', '.join(_FLAGS)}")
        key, value = _FLAGS[extra]
        cfg[key] = value
    return cfg


def parse_configs(text: str) -> list[dict]:
    """Comma-separated configs, e.g. "8x3,8x3:bptr,8x2x32:half:atomic"."""
    return [parse_config(part) for part in text.split(",") if part]
