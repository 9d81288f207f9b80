"""Training metrics: throughput, MFU, peak memory and the console progress bar.

``MetricLogger`` / ``LoggerConfig`` (wandb or nothing) live in ``logger.py`` and
are re-exported here, so ``metrics`` is the one import the trainer needs.

MFU = achieved model FLOP/s / the device's dense peak for the precision in use,
where achieved FLOP/s = ``flops_per_token`` (``GPT.flops_per_token``, forward +
backward) x tokens/s. Both sides must count the same devices: per-device
tokens/s against one device's peak.
"""
from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TextIO

import torch

from flamia_train.logger import LoggerConfig, MetricLogger, validate_logger

__all__ = [
    "LoggerConfig", "MetricLogger", "validate_logger", "peak_flops", "mfu", "Throughput",
    "peak_memory_bytes", "reset_peak_memory", "ProgressBar",
]

# Dense (no 2:4 sparsity) tensor-core peaks in FLOP/s from the vendors' datasheets, keyed by a
# substring of torch.cuda.get_device_name(); the first match wins, so specific names come first.
# MX formats run at their element type's rate; a format a GPU has no tensor cores for is absent.
_PEAKS: list[tuple[str, dict[str, float]]] = [
    ("H100 PCIe", {"bf16": 756e12, "fp8": 1513e12}),
    ("H100", {"bf16": 989e12, "fp8": 1979e12}),  # SXM / HBM3
    ("H200", {"bf16": 989e12, "fp8": 1979e12}),
    ("GH200", {"bf16": 989e12, "fp8": 1979e12}),
    ("B200", {"bf16": 2250e12, "fp8": 4500e12, "mxfp8": 4500e12, "nvfp4": 9000e12}),
    ("A100", {"bf16": 312e12}),
]


def peak_flops(device: torch.device, dtype: str = "bf16") -> float | None:
    """Dense peak FLOP/s of ``device`` for ``dtype`` (bf16 | fp16 | fp8 | mxfp8 | nvfp4); None if unknown.

    CPUs and GPUs missing from the table return None and MFU is reported as n/a
    rather than against a made-up number.
    """
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    dtype = "bf16" if dtype == "fp16" else dtype  # same tensor-core rate on every GPU listed
    name = torch.cuda.get_device_name(device)
    for key, peaks in _PEAKS:
        if key in name:
            return peaks.get(dtype)
    return None


def mfu(flops_per_token: float, tokens_per_s: float | None, peak: float | None) -> float | None:
    """Model FLOP utilisation in [0, 1] (a fraction, not percent); None when any input is unknown."""
    if peak is None or peak <= 0 or tokens_per_s is None:
        return None
    return flops_per_token * tokens_per_s / peak


def peak_memory_bytes(device: torch.device) -> int:
    """Peak memory of this process in bytes: CUDA allocator peak on a GPU, max RSS on the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    import resource  # POSIX only; imported here so importing metrics stays portable

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # macOS reports bytes, Linux KiB


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak (CUDA allocator). The CPU's max RSS cannot be reset: it stays the process peak."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


class Throughput:
    """Tokens/s over the last ``window`` steps, ignoring the first ``warmup_steps`` (compilation, caches)."""

    def __init__(self, window: int = 20, warmup_steps: int = 2,
                 clock: Callable[[], float] = time.perf_counter):
        self.warmup_steps = warmup_steps
        self.clock = clock
        self._window: deque[tuple[int, float]] = deque(maxlen=window)  # (tokens, seconds) per counted step
        self._steps = 0
        self._last: float | None = None

    def update(self, tokens: int, seconds: float | None = None) -> None:
        """Record one finished optimizer step: its tokens (this rank or global) and its duration.

        Without ``seconds`` the duration is the clock time since the previous
        call, so the very first step is never counted (its start is unknown).
        """
        now = self.clock()
        if seconds is None and self._last is not None:
            seconds = now - self._last
        self._last = now
        self._steps += 1
        if self._steps > self.warmup_steps and seconds is not None:
            self._window.append((tokens, seconds))

    def tokens_per_s(self) -> float | None:
        """Tokens per second over the window; None until a step after warm-up has been recorded."""
        seconds = sum(s for _, s in self._window)
        return sum(t for t, _ in self._window) / seconds if seconds > 0 else None


def _fmt_duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _fmt_rate(tokens_per_s: float | None) -> str:
    if tokens_per_s is None:
        return "n/a"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if tokens_per_s >= scale:
            return f"{tokens_per_s / scale:.1f}{suffix}"
    return f"{tokens_per_s:.0f}"


class ProgressBar:
    """One console line on stderr (rank 0): step/total, loss, lr, tokens/s, MFU, ETA.

    On a terminal the line is redrawn in place with ``\\r``; when stderr is a
    file or pipe (CI, SLURM logs) a plain line is printed every ``every`` steps
    and on the last step, so logs stay readable.
    """

    def __init__(self, total_steps: int, enabled: bool, stream: TextIO | None = None,
                 every: int | None = None, clock: Callable[[], float] = time.monotonic):
        self.total = total_steps
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = every or max(1, total_steps // 20)
        self.clock = clock
        self._start: tuple[float, int] | None = None  # (time, step) of the first update: ETA baseline
        self._width = 0

    def format(self, step: int, metrics: Mapping[str, float | None]) -> str:
        """The bar's text for one step (no control characters); reads loss, lr, tokens_per_s, mfu."""
        now = self.clock()
        if self._start is None:
            self._start = (now, step)
        t0, s0 = self._start
        eta = "n/a" if step <= s0 else _fmt_duration((now - t0) / (step - s0) * (self.total - step))
        loss, lr, util = metrics.get("loss"), metrics.get("lr"), metrics.get("mfu")
        return (f"step {step:>{len(str(self.total))}}/{self.total} | "
                f"loss {'n/a' if loss is None else f'{float(loss):.4f}'} | "
                f"lr {'n/a' if lr is None else f'{float(lr):.2e}'} | "
                f"{_fmt_rate(metrics.get('tokens_per_s'))} tok/s | "
                f"MFU {'n/a' if util is None else f'{100 * util:.1f}%'} | ETA {eta}")

    def update(self, step: int, metrics: Mapping[str, float | None]) -> None:
        """Show finished ``step`` (1-based) with the trainer's metrics dict (missing keys print n/a)."""
        if not self.enabled:
            return
        line = self.format(step, metrics)
        if self.tty:
            # Pad with spaces so a shorter line fully covers the previous one.
            self.stream.write("\r" + line.ljust(self._width))
            self._width = max(self._width, len(line))
        elif step % self.every == 0 or step == self.total:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self, summary: dict[str, object] | None = None) -> None:
        """End the bar and print one summary line (``key value`` pairs, floats to 4 significant digits)."""
        if not self.enabled:
            return
        if self.tty and self._width:
            self.stream.write("\n")
        if summary:
            parts = [f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()]
            self.stream.write("done: " + " | ".join(parts) + "\n")
        self.stream.flush()
