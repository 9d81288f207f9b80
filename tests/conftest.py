"""Test-suite set-up: CPU runs use Triton's interpreter; GPU and slow tiers are opt-in.

TRITON_INTERPRET must be set before any module that defines a Triton kernel is
imported, so it is decided here, at collection time, from whether CUDA exists.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

pytest_plugins = ["reliability_report"]  # counts of kill points, bad inputs and faults in the summary


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="run tests marked slow")


def pytest_collection_modifyitems(config, items):
    run_slow = config.getoption("--runslow") or os.environ.get("FLAMIA_RUN_SLOW") == "1"
    has_gpu = torch.cuda.is_available()
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(pytest.mark.skip(reason="slow: pass --runslow or FLAMIA_RUN_SLOW=1"))
        if "gpu" in item.keywords and not has_gpu:
            item.add_marker(pytest.mark.skip(reason="gpu: needs CUDA (run on the device machine)"))
