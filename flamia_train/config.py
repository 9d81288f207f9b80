"""The root config: composes each component's dataclass, registers it with Hydra, validates it.

Each component owns its config dataclass (model.ModelConfig, data.DataConfig, ...);
this module only composes them into `FlamiaConfig`, stores it in Hydra's ConfigStore
as the schema `configs/train.yaml` extends (so a misspelt key or a wrong type fails
at composition), and runs every cross-field check in one `validate(cfg)` before any
device memory is touched.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from flamia_train.checkpoint import CheckpointConfig
from flamia_train.context import build_context_schedule
from flamia_train.data import DataConfig
from flamia_train.errors import ConfigError
from flamia_train.guard import validate_guard
from flamia_train.metrics import LoggerConfig, validate_logger
from flamia_train.model import ModelConfig, validate_model_config
from flamia_train.parallel import ParallelConfig, validate_parallel
from flamia_train.precision import PrecisionConfig
from flamia_train.precision_schedule import PrecisionPlan, build_plan
from flamia_train.schedules import ScheduleConfig, validate_schedule
from flamia_train.trainer import OPTIMIZER_IMPLS, TrainConfig

RESUME_WORDS = ("auto", "never")


@dataclass
class FlamiaConfig:
    """Everything one training run needs; `configs/train.yaml` fills it in."""

    model: ModelConfig = field(default_factory=ModelConfig)  # network shape (configs/model/)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)  # recipe (configs/precision/)
    data: DataConfig = field(default_factory=DataConfig)  # corpus and tokenizer (configs/data/)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)  # LR schedule (configs/schedule/)
    logger: LoggerConfig = field(default_factory=LoggerConfig)  # wandb | none (configs/logger/)
    train: TrainConfig = field(default_factory=TrainConfig)  # steps, batch, optimizer
    parallel: ParallelConfig = field(default_factory=ParallelConfig)  # FSDP2 / HSDP / AC / compile
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)  # interval, keep, export
    run_dir: str = "runs/default"  # everything the run writes goes under it
    resume: str = "auto"  # auto (newest complete checkpoint in run_dir) | never | PATH to a checkpoint


def register_configs() -> None:
    """Store the schema so `configs/train.yaml` can list `flamia_schema` first in its defaults."""
    cs = ConfigStore.instance()
    cs.store(name="flamia_schema", node=FlamiaConfig)


def to_dataclass(cfg: DictConfig) -> FlamiaConfig:
    """The typed object the builders take (Hydra already checked keys and types)."""
    return OmegaConf.to_object(cfg) if isinstance(cfg, DictConfig) else cfg


def _positive(key: str, value, *, allow_zero: bool = False) -> None:
    ok = value >= 0 if allow_zero else value > 0
    if not ok:
        raise ConfigError(key, value, "must be >= 0" if allow_zero else "must be > 0")


def _one_of(key: str, value: str, allowed) -> None:
    if value not in allowed:
        raise ConfigError(key, value, f"allowed: {', '.join(allowed)}")


def _validate_model(m: ModelConfig, specs) -> None:
    """The shape rules live with the model; here only the rule that couples it to the attention specs."""
    from flamia_kernels import SUPPORTED_HEAD_DIMS

    validate_model_config(m)
    quantized = [i for i, s in enumerate(specs) if s.name != "bf16"]
    if quantized and m.head_dim not in SUPPORTED_HEAD_DIMS:
        raise ConfigError(
            "model.n_heads", m.n_heads,
            f"head_dim {m.head_dim} (layer {quantized[0]} uses attention '{specs[quantized[0]].name}') must be one "
            f"of {sorted(SUPPORTED_HEAD_DIMS)} for quantized FLAMIA attention",
        )


def _validate_train(cfg: FlamiaConfig, world_size: int) -> None:
    from flamia_kernels import SEQ_BLOCK

    t = cfg.train
    for key in ("steps", "seq_len", "micro_batch_size", "lr"):
        _positive(f"train.{key}", getattr(t, key))
    for key in ("weight_decay", "grad_clip", "eval_interval", "eval_batches", "tokens_per_step"):
        _positive(f"train.{key}", getattr(t, key), allow_zero=True)
    if not (0 <= t.beta1 < 1 and 0 <= t.beta2 < 1):
        raise ConfigError("train.beta1/beta2", (t.beta1, t.beta2), "each must be in [0, 1)")
    _one_of("train.optimizer_impl", t.optimizer_impl, OPTIMIZER_IMPLS)
    if t.seq_len % SEQ_BLOCK:
        raise ConfigError("train.seq_len", t.seq_len, f"must be a multiple of the attention block {SEQ_BLOCK}")
    validate_guard(t.spike_sigma, t.spike_window, t.max_bad_steps, t.inject_fault)
    micro_tokens = t.micro_batch_size * t.seq_len * world_size
    # With context stages, each stage's micro-batch is checked against tokens_per_step instead.
    if t.tokens_per_step and t.tokens_per_step % micro_tokens and not cfg.schedule.context.stages:
        raise ConfigError(
            "train.tokens_per_step", t.tokens_per_step,
            f"must be a multiple of micro_batch_size x seq_len x data-parallel ranks = {micro_tokens}",
        )


def _validate_context(cfg: FlamiaConfig, world_size: int) -> None:
    """The context stages resolve (lengths, micro-batches, RoPE). Document masking runs with every
    attention spec (the FLAMIA kernels take doc ids), so it needs no check here."""
    build_context_schedule(cfg.schedule.context, cfg.train, rope_theta=cfg.model.rope_theta, world_size=world_size)


def _validate_data(d: DataConfig) -> None:
    _one_of("data.source", d.source, ("stdlib", "files", "disk", "hub"))
    if d.source == "hub" and not d.hub_name:
        raise ConfigError("data.hub_name", d.hub_name, "must name a dataset when data.source=hub")
    if d.source != "hub" and not d.path:
        raise ConfigError("data.path", d.path, f"must be set when data.source={d.source}")
    if not 0 <= d.heldout_fraction < 1:
        raise ConfigError("data.heldout_fraction", d.heldout_fraction, "must be in [0, 1)")
    _positive("data.vocab_size", d.vocab_size)


def _validate_run(cfg: FlamiaConfig, world_size: int) -> None:
    validate_logger(cfg.logger)
    validate_parallel(cfg.parallel, world_size)
    _positive("checkpoint.interval", cfg.checkpoint.interval, allow_zero=True)
    _positive("checkpoint.keep", cfg.checkpoint.keep)
    if cfg.resume not in RESUME_WORDS and not Path(cfg.resume).exists():
        raise ConfigError("resume", cfg.resume, "must be auto, never, or the path of an existing checkpoint")
    _check_writable_dir("run_dir", Path(cfg.run_dir))


def _check_writable_dir(key: str, path: Path) -> None:
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(key, str(path), f"'{existing}' is a file, so the directory cannot be created")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(key, str(path), f"'{existing}' is not writable")


def _precision_plan(cfg: FlamiaConfig, world_size: int) -> PrecisionPlan:
    """Every phase of the recipe resolved to a layer × op table (errors name the precision.* key)."""
    _positive("model.n_layers", cfg.model.n_layers)
    _positive("precision.telemetry_interval", cfg.precision.telemetry_interval, allow_zero=True)
    t = cfg.train
    tokens_per_step = t.tokens_per_step or max(1, t.micro_batch_size * t.seq_len * world_size)
    return build_plan(cfg.precision, cfg.model.n_layers, t.steps, tokens_per_step)


def validate(cfg: FlamiaConfig, world_size: int = 1) -> PrecisionPlan:
    """Check every value and cross-field rule; return the resolved precision plan (phases of policies).

    Raises ConfigError naming the key, the value and the rule. Runs before any device work.
    """
    plan = _precision_plan(cfg, world_size)
    _validate_model(cfg.model, [s for phase in plan.phases for s in phase.policy.attention])
    _validate_train(cfg, world_size)
    validate_schedule(cfg.schedule, cfg.train.steps)
    _validate_context(cfg, world_size)
    _validate_data(cfg.data)
    _validate_run(cfg, world_size)
    return plan
