"""scripts/bench_attention.py's launch-config sweep syntax (what a profile run's --bwd-configs means)."""
import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from bench_attention import _configs  # noqa: E402


def test_configs_parse_every_part():
    assert _configs("8x3:bptr")[0]["BPTR"] is True
    assert _configs("8x2x32:half")[0]["bn"] == 64
    assert _configs("8x3,4x2x32:atomic:dkdv,8x3:fresh,8x2x64:kernel") == [
        {"num_warps": 8, "num_stages": 3},
        {"num_warps": 4, "num_stages": 2, "sub": 32, "dq": "atomic", "which": "dkdv"},
        {"num_warps": 8, "num_stages": 3, "CHAIN": False},
        {"num_warps": 8, "num_stages": 2, "sub": 64, "dq": "kernel"},
    ]


def test_configs_name_an_unknown_part():
    with pytest.raises(argparse.ArgumentTypeError, match="'8x2:fast'.*'fast'.*allowed fresh, bptr, half, atomic"):
        _configs("8x2:fast")
