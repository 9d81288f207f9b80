"""scripts/bench_torchtitan.py's pure parts: the torchrun command it builds and the parsing of
torchtitan's per-step log (the run itself needs torchtitan and a GPU: scripts/device/session4_torchtitan.sh)."""
from __future__ import annotations

import sys
from argparse import Namespace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import bench_torchtitan as bt  # noqa: E402

# torchtitan 0.2.2's metric line with --metrics.disable_color_printing (seen on the CPU with a shim device)
HEAD = "[titan] 2026-11-30 19:17:02,526 - root - INFO - "
LOG = (f"{HEAD}Trainer is initialized with local batch size 1, ...\n"
       f"{HEAD}step:  1  loss: 10.91316  grad_norm:  0.7199  memory: 12.50GiB(8.96%)  tps: 808  tflops: 0.05"
       "  mfu: 0.02%\n"
       f"{HEAD}step:  2  loss: 10.80000  grad_norm:  0.7000  memory: 13.25GiB(9.50%)  tps: 41,250  tflops: 300.00"
       "  mfu: 30.33%\n")


def test_parse_steps_reads_torchtitans_metric_lines():
    steps = bt.parse_steps(LOG)
    assert [s["step"] for s in steps] == [1, 2]
    assert steps[1] == {"step": 2, "loss": 10.8, "memory_gib": 13.25, "tps": 41250.0}


def test_command_matches_bench_train_batching():
    args = Namespace(micro_tokens=8192, tokens_per_step=16384, warmup=3, steps=5)
    cmd = bt.command(8192, "compile", args, "/tmp/x")
    value = {cmd[i]: cmd[i + 1] for i in range(len(cmd) - 1) if cmd[i].startswith("--")}
    assert value["--training.local_batch_size"] == "1" and value["--training.global_batch_size"] == "2"
    assert value["--training.steps"] == "8" and value["--model.flavor"] == "gpt1b"
    assert cmd[-1] == "--compile.enable" and "torchtitan_gpt1b" in cmd
    assert "--compile.enable" not in bt.command(8192, "eager", args, "/tmp/x")
    with pytest.raises(SystemExit, match="not a multiple"):
        bt.command(32768, "eager", args, "/tmp/x")
