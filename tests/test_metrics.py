"""Metrics: MFU arithmetic, throughput window, progress bar text, and both logger backends."""
import io
import random
import re
import sys

import pytest
import torch

from flamia_train.errors import ConfigError
from flamia_train.metrics import (
    LoggerConfig,
    MetricLogger,
    ProgressBar,
    Throughput,
    mfu,
    peak_flops,
    peak_memory_bytes,
)


class FakeClock:
    def __init__(self):
        self.now = random.uniform(100.0, 1000.0)

    def __call__(self):
        return self.now


def test_mfu_arithmetic():
    flops_per_token = random.uniform(1e8, 1e9)
    tokens_per_s = random.uniform(1e4, 1e5)
    peak = 989e12
    assert mfu(flops_per_token, tokens_per_s, peak) == pytest.approx(flops_per_token * tokens_per_s / peak)
    assert mfu(6 * 125e6, 400_000, 989e12) == pytest.approx(0.3033, abs=1e-4)
    assert mfu(flops_per_token, tokens_per_s, None) is None
    assert mfu(flops_per_token, None, peak) is None


def test_peak_flops_unknown_on_cpu():
    assert peak_flops(torch.device("cpu")) is None
    assert peak_flops(torch.device("cpu"), "fp8") is None


@pytest.mark.gpu
def test_peak_flops_on_h200_or_h100():
    name = torch.cuda.get_device_name()
    if "H200" not in name and "H100" not in name:
        pytest.skip(f"table check is for Hopper, got {name}")
    bf16 = peak_flops(torch.device("cuda"), "bf16")
    assert bf16 in (989e12, 756e12)
    assert peak_flops(torch.device("cuda"), "fp8") == pytest.approx(2 * bf16, rel=1e-3)


def test_peak_memory_is_positive_on_cpu():
    block = torch.randn(1024, 1024)  # 4 MiB live, so the RSS peak is at least that
    assert peak_memory_bytes(torch.device("cpu")) > block.numel() * 4


def test_throughput_excludes_warmup_and_uses_window():
    clock = FakeClock()
    meter = Throughput(window=3, warmup_steps=2, clock=clock)
    for seconds in (50.0, 20.0):  # slow warm-up steps (compilation): never counted
        clock.now += seconds
        meter.update(1000)
        assert meter.tokens_per_s() is None
    for seconds, tokens in ((1.0, 500), (2.0, 500), (1.0, 1000), (1.0, 1000)):
        clock.now += seconds
        meter.update(tokens)
    # window of the last 3 steps: 2500 tokens in 4 seconds
    assert meter.tokens_per_s() == pytest.approx(2500 / 4.0)


def test_throughput_with_measured_step_times():
    meter = Throughput(window=4, warmup_steps=1)
    times = [random.uniform(0.1, 1.0) for _ in range(6)]
    for seconds in times:
        meter.update(2048, seconds)
    assert meter.tokens_per_s() == pytest.approx(4 * 2048 / sum(times[-4:]))


def test_progress_bar_plain_lines_when_not_a_tty():
    clock = FakeClock()
    out = io.StringIO()
    bar = ProgressBar(total_steps=100, enabled=True, stream=out, every=50, clock=clock)
    loss = random.uniform(2.0, 5.0)
    for step in range(1, 101):
        clock.now += 0.5
        util = 0.4123 if step > 1 else None
        bar.update(step, {"loss": loss, "lr": 3e-4, "tokens_per_s": 12_345.0, "mfu": util})
    bar.close({"step": 100, "heldout_loss": 2.71828, "tokens_per_s": 12345.0})
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert "\r" not in out.getvalue()
    assert re.fullmatch(
        rf"step  50/100 \| loss {loss:.4f} \| lr 3\.00e-04 \| 12\.3k tok/s \| MFU 41\.2% \| ETA 0:00:25",
        lines[0],
    )
    assert lines[1].startswith("step 100/100") and lines[1].endswith("ETA 0:00:00")
    assert lines[2] == "done: step 100 | heldout_loss 2.718 | tokens_per_s 1.234e+04"


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_redraws_in_place_on_a_tty():
    out = _Tty()
    bar = ProgressBar(total_steps=10, enabled=True, stream=out, clock=FakeClock())
    for step in range(1, 4):
        bar.update(step, {"loss": random.uniform(2, 5), "lr": 1e-3, "grad_norm": 1.0})
    bar.close()
    text = out.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1
    assert "MFU n/a" in text and "n/a tok/s" in text


def test_progress_bar_disabled_is_silent(capsys):
    bar = ProgressBar(total_steps=5, enabled=False)
    bar.update(1, {"loss": 3.0, "lr": 1e-3})
    bar.close({"step": 1})
    assert capsys.readouterr().err == ""


def test_logger_none_never_imports_wandb(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # any `import wandb` now raises ImportError
    cfg = LoggerConfig(backend="none")
    logger = MetricLogger(cfg, tmp_path, {"train": {"lr": 1e-3}}, run_id=None, enabled=True)
    assert re.fullmatch(r"[0-9a-z]{8}", logger.run_id)
    assert logger.run_id != MetricLogger(cfg, tmp_path, {}, run_id=None, enabled=True).run_id
    logger.log({"loss": torch.tensor(random.uniform(2, 5)), "lr": 1e-3}, step=10)
    logger.log_table("precision", ["layer", "qk"], [[0, "fp8"], [1, "nvfp4"]])
    logger.summary({"heldout_loss": 3.0})
    logger.close()
    assert list(tmp_path.iterdir()) == []
    assert MetricLogger(cfg, tmp_path, {}, run_id="abc12345", enabled=True).run_id == "abc12345"
    assert [logger.should_log(s) for s in (1, 5, 10, 20)] == [True, False, True, True]


def test_disabled_logger_writes_nothing(tmp_path):
    logger = MetricLogger(LoggerConfig(), tmp_path / "rank1", {}, run_id="r1", enabled=False)
    logger.log({"loss": 1.0}, step=1)
    logger.close()
    assert logger.run_id == "r1" and not (tmp_path / "rank1").exists()


def test_bad_logger_config():
    with pytest.raises(ConfigError, match="logger.backend"):
        MetricLogger(LoggerConfig(backend="tensorboard"), ".", {}, None, enabled=False)
    with pytest.raises(ConfigError, match="logger.mode"):
        MetricLogger(LoggerConfig(mode="shared"), ".", {}, None, enabled=False)


def test_wandb_offline_files_and_stable_run_id(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_CODE", "true")
    cfg = LoggerConfig(backend="wandb", mode="offline", tags=["test"])
    first = MetricLogger(cfg, tmp_path, {"model": "tiny"}, run_id=None, enabled=True)
    run_id = first.run_id
    first.log({"loss": random.uniform(2, 5)}, step=1)
    first.log_table("precision", ["layer", "spec"], [[0, "bf16"]])
    first.close()
    runs = list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}"))
    assert runs and any(runs[0].rglob("*.wandb"))

    resumed = MetricLogger(cfg, tmp_path, {"model": "tiny"}, run_id=run_id, enabled=True)
    assert resumed.run_id == run_id and resumed._run.id == run_id
    resumed.log({"loss": random.uniform(2, 5)}, step=2)
    resumed.close()


@pytest.mark.parametrize("name,backend", [("wandb", "wandb"), ("none", "none")])
def test_shipped_logger_yaml_matches_the_schema(name, backend):
    from pathlib import Path

    from omegaconf import OmegaConf

    from flamia_train.logger import validate_logger

    path = Path(__file__).parents[1] / "configs" / "logger" / f"{name}.yaml"
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(LoggerConfig), OmegaConf.load(path)))
    validate_logger(cfg)
    assert cfg.backend == backend and cfg.mode in ("offline", "disabled")
