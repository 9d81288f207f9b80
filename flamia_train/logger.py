"""Experiment tracking: Weights & Biases (offline unless told otherwise) or nothing.

With ``backend=wandb`` a run's files live under ``run_dir/wandb`` (``wandb sync
run_dir/wandb/offline-run-*`` uploads an offline run later). wandb is imported
only when it is used, so ``logger=none`` never loads it. The local record of
every step (``run_dir/metrics.jsonl``) is the trainer's, written for both backends.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flamia_train.errors import ConfigError

BACKENDS = ("wandb", "none")
MODES = ("offline", "online", "disabled")


@dataclass
class LoggerConfig:
    """Where metrics go: a wandb run (offline by default) or nowhere but the console and metrics.jsonl."""

    backend: str = "wandb"  # wandb | none
    project: str = "flamia-train"  # wandb project
    entity: str = ""  # wandb team or user; empty = the logged-in default
    mode: str = "offline"  # offline (files under run_dir/wandb) | online | disabled
    name: str = ""  # run display name; empty lets wandb choose
    log_interval: int = 10  # steps between logged points
    tags: list[str] = field(default_factory=list)  # wandb run tags


def validate_logger(cfg: LoggerConfig) -> None:
    """Raise ``ConfigError`` naming the first bad ``logger.*`` value."""
    if cfg.backend not in BACKENDS:
        raise ConfigError("logger.backend", cfg.backend, f"one of {', '.join(BACKENDS)}")
    if cfg.mode not in MODES:
        raise ConfigError("logger.mode", cfg.mode, f"one of {', '.join(MODES)}")
    if cfg.log_interval < 1:
        raise ConfigError("logger.log_interval", cfg.log_interval, "an integer >= 1")


def new_run_id() -> str:
    """An 8-character id in wandb's alphabet (lower-case letters and digits)."""
    return uuid.uuid4().hex[:8]


class MetricLogger:
    """Logs scalars, tables and a summary for one run; a no-op when ``enabled`` is False (ranks > 0).

    ``run_id`` is stable: pass the id stored in a checkpoint to continue the same
    wandb run after a resume; a new id is generated otherwise, for every backend,
    so checkpoints can always carry one.
    """

    def __init__(self, cfg: LoggerConfig, run_dir: Path, config: dict, run_id: str | None, enabled: bool):
        validate_logger(cfg)
        self.cfg = cfg
        self.run_id = run_id or new_run_id()
        self.enabled = enabled
        self.run_dir = Path(run_dir)
        self._run = None
        if enabled and cfg.backend == "wandb":
            import wandb  # lazily: importing wandb costs seconds and logger=none must not need it

            self._run = wandb.init(
                dir=str(self.run_dir),
                mode=cfg.mode,
                id=self.run_id,
                resume="allow",
                config=config,
                project=cfg.project,
                entity=cfg.entity or None,
                name=cfg.name or None,
                tags=list(cfg.tags) or None,
            )

    def should_log(self, step: int) -> bool:
        """True on steps the trainer should send to ``log`` (every ``log_interval``-th, and step 1)."""
        return step == 1 or step % self.cfg.log_interval == 0

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Record scalar ``metrics`` (loss, lr, grad_norm, tokens_per_s, mfu, peak_mem_gib...) at ``step``."""
        if self._run is not None:
            self._run.log(dict(metrics), step=step)

    def log_table(self, name: str, columns: list[str], rows: list[list[Any]]) -> None:
        """A table logged once (e.g. the per-layer precision recipe at start-up)."""
        if self._run is not None:
            import wandb

            self._run.log({name: wandb.Table(columns=list(columns), data=[list(r) for r in rows])})

    def summary(self, values: dict[str, Any]) -> None:
        """Final numbers of the run (held-out loss, tokens/s, ...) into the wandb run's summary."""
        if self._run is not None:
            self._run.summary.update(dict(values))

    def close(self) -> None:
        """Finish the wandb run (files flushed); safe to call twice."""
        if self._run is not None:
            self._run.finish()
            self._run = None

