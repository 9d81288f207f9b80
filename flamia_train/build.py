"""Builds one run from a validated config: process group, data, model, optimizer, logger, checkpoints.

Order matters and follows torchtitan: the model is created on the meta device, sharded
by FSDP2, materialised with `to_empty`, then initialised, so no rank ever holds the whole
unsharded model. A resume loads into the sharded model after that.
"""

from __future__ import annotations

import random
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from flamia_train import data, parallel
from flamia_train.checkpoint import CheckpointManager, RNGState
from flamia_train.config import FlamiaConfig
from flamia_train.context import ContextSchedule, build_context_schedule
from flamia_train.guard import StepGuard
from flamia_train.metrics import MetricLogger, ProgressBar, peak_flops
from flamia_train.model import GPT
from flamia_train.precision_schedule import PrecisionController, PrecisionPlan
from flamia_train.schedules import LRSchedule
from flamia_train.telemetry import PrecisionTelemetry
from flamia_train.trainer import TrainState


def model_config_dict(cfg: FlamiaConfig) -> dict:
    """The model shape as saved in checkpoints: a resume into another shape is refused."""
    return OmegaConf.to_container(OmegaConf.structured(cfg.model))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


_WRAPPER_PREFIXES = ("_checkpoint_wrapped_module.", "_orig_mod.")


def _plain_name(name: str) -> str:
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


@torch.no_grad()
def init_weights_any_world_size(model: torch.nn.Module, cfg: FlamiaConfig, specs: list, seed: int) -> None:
    """Give the sharded `model` exactly the weights an unsharded model gets from `seed`.

    Random init of a sharded parameter draws different numbers on each world size (each rank
    samples its own shard), so 1 and N processes would start from different weights. Instead an
    unsharded twin is initialised on the CPU from `seed` and each rank copies its shard out of it:
    the same weights for any number of ranks and any device. It costs the model's fp32 size in
    host memory per rank for the moment of initialisation.
    """
    from torch.distributed.tensor import DTensor, distribute_tensor

    twin = GPT(cfg.model, attention_specs=specs)
    torch.manual_seed(seed)
    twin.init_weights()
    full = {name: p for name, p in twin.named_parameters()}
    for name, param in model.named_parameters():
        source = full[_plain_name(name)].to(param.device, param.dtype)
        if isinstance(param, DTensor):
            param.to_local().copy_(distribute_tensor(source, param.device_mesh, param.placements).to_local())
        else:
            param.copy_(source)
    del twin, full


def optimizer_kernels(impl: str, on_cuda: bool) -> dict:
    """torch.optim.AdamW's `fused` / `foreach` flags for `train.optimizer_impl`.

    auto: fused on CUDA (one kernel over all parameters; 21.8 ms of foreach's AdamW per gpt-1b step
    was the largest single item of `other` in bench_train's profile, and torchtitan defaults to
    fused too), for-loop on the CPU (what the CPU tests were written against)."""
    if impl == "auto":
        impl = "fused" if on_cuda else "for-loop"
    return {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}[impl]


def build_optimizer(model: torch.nn.Module, cfg) -> torch.optim.Optimizer:
    """AdamW; weight decay on matrices only (norm gains and biases are not decayed)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kernels = optimizer_kernels(cfg.optimizer_impl, any(p.device.type == "cuda" for p in decay))
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, **kernels)


@dataclass
class Run:
    """Every live component of one training run."""

    cfg: FlamiaConfig
    env: parallel.DistEnv
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    lr_schedule: LRSchedule
    train_loader: Any
    heldout_loader: Any
    heldout_start: dict
    logger: MetricLogger
    progress: ProgressBar
    checkpoints: CheckpointManager
    flops_per_token: int
    peak_flops: float | None
    precision_plan: PrecisionPlan  # the recipe's phases (precision_schedule)
    rng: RNGState
    state: TrainState = field(default_factory=TrainState)
    guard: StepGuard = field(default_factory=StepGuard)
    resumed_from: Path | None = None
    precision: PrecisionController | None = None  # applies the plan's phase each step; FLOP split, telemetry
    context: ContextSchedule | None = None  # step -> seq_len / RoPE / micro-batch (flamia_train.context)

    @property
    def metrics_path(self) -> Path:
        return Path(self.cfg.run_dir) / "metrics.jsonl"

    def _meta(self) -> dict:
        return {
            "step": self.state.step,
            "wandb_run_id": self.logger.run_id,
            "model": model_config_dict(self.cfg),
            "precision": self.cfg.precision.name,
        }

    def _app_state(self) -> dict:
        return {"context_schedule": self.context,
                "train_state": self.state, "train_loader": self.train_loader, "lr_schedule": self.lr_schedule,
                "guard": self.guard}

    def save_checkpoint(self) -> Path:
        return self.checkpoints.save(
            self.state.step, self.model, self.optimizer, self._app_state(), self._meta(), {"rng": self.rng}
        )

    def resume(self, resume: str) -> dict:
        """Restore from `resume` (auto | never | PATH); auto skips corrupt checkpoints with a warning."""
        args = (self.model, self.optimizer, self._app_state(), {"rng": self.rng})
        if resume == "auto":
            meta = self.checkpoints.load_latest(*args) or {}
        elif resume == "never":
            meta = {}
        else:
            meta = self.checkpoints.load(self.checkpoints.resolve(resume), *args)
        if meta:
            self.resumed_from = Path(self.cfg.run_dir) / "checkpoints" / f"step_{int(meta['step']):08d}"
            if resume not in ("auto", "never"):
                self.resumed_from = Path(resume)
            _note_recipe_change(meta, self.cfg.precision.name, self.resumed_from)
        return meta

    def export(self) -> Path:
        """Consolidated safetensors of the final weights, for inference."""
        path = Path(self.cfg.run_dir) / "export" / f"model_step{self.state.step:08d}.safetensors"
        if not path.exists():
            self.checkpoints.export_safetensors(self.model, path)
        return path

    def close(self, summary: dict | None = None) -> None:
        self.progress.close(summary)
        if summary is not None:
            self.logger.summary(summary)
        self.logger.close()


def _cluster_peak(env: parallel.DistEnv) -> float | None:
    """bf16 peak FLOP/s of all ranks together: MFU divides global tokens/s by it."""
    peak = peak_flops(env.device, "bf16")
    return peak * env.world_size if peak is not None else None


def _note_recipe_change(meta: dict, current: str, path: Path) -> None:
    """Warn (not refuse) when a checkpoint was trained under another precision recipe.

    Weights and optimizer state are stored in full precision whatever the recipe (a recipe
    only changes how matmuls and attention compute), so switching recipes on resume is a
    legitimate move (bf16 warm-up then FP8, or back to bf16 after a divergence); but it should
    never happen silently.
    """
    saved = meta.get("precision")
    if saved is not None and saved != current:
        warnings.warn(f"checkpoint {path} was trained with precision recipe '{saved}', this run uses "
                      f"'{current}': weights and optimizer state load unchanged, the new recipe applies from "
                      "the next step", stacklevel=3)


def _say(env: parallel.DistEnv, text: str) -> None:
    if env.is_main:
        print(text, file=sys.stderr, flush=True)


def build_run(cfg: FlamiaConfig, env: parallel.DistEnv, plan: PrecisionPlan) -> Run:
    """Build every component; resume from `cfg.resume` if it names a checkpoint."""
    specs = plan.policy_at(0).attention  # built in phase 0; the controller moves it to the step's phase
    run_dir = Path(cfg.run_dir)
    checkpoints = CheckpointManager(cfg.checkpoint, run_dir, env.rank, env.world_size, parallel.barrier,
                                    model_config=model_config_dict(cfg))
    if cfg.resume not in ("auto", "never"):
        checkpoints.resolve(cfg.resume)  # a bad PATH fails before the data and model are built

    data.ensure_default_corpus(cfg.data, env.is_main, parallel.barrier)
    tokenizer = data.build_tokenizer(cfg.data)
    data.check_vocab(tokenizer, cfg.model.vocab_size)
    t = cfg.train
    train_loader = data.build_loader(cfg.data, tokenizer, cfg.data.split, t.seq_len, t.micro_batch_size,
                                     env.rank, env.world_size)
    heldout_loader = data.build_loader(cfg.data, tokenizer, cfg.data.heldout_split, t.seq_len, t.micro_batch_size,
                                       env.rank, env.world_size)

    seed_everything(t.seed)
    with torch.device("meta"):
        model = GPT(cfg.model, attention_specs=specs)
    model = parallel.parallelize(model, cfg.parallel, parallel.build_mesh(env, cfg.parallel))
    model.to_empty(device=env.device)
    init_weights_any_world_size(model, cfg, specs, t.seed)
    seed_everything(t.seed + env.rank)  # per-rank streams from here on

    optimizer = build_optimizer(model, t)
    lr_schedule = LRSchedule(cfg.schedule, t.lr, t.steps)
    context = build_context_schedule(cfg.schedule.context, t, rope_theta=cfg.model.rope_theta,
                                     world_size=env.world_size)
    config_dict = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    run = Run(
        cfg=cfg, env=env, model=model, optimizer=optimizer, lr_schedule=lr_schedule, context=context,
        train_loader=train_loader, heldout_loader=heldout_loader, heldout_start=heldout_loader.state_dict(),
        logger=None, progress=ProgressBar(t.steps, env.is_main), checkpoints=checkpoints,
        flops_per_token=model.flops_per_token(t.seq_len),
        peak_flops=_cluster_peak(env), precision_plan=plan, rng=RNGState(t.seed, env.rank),
        guard=StepGuard(t.spike_sigma, t.spike_window, t.max_bad_steps),
    )
    meta = run.resume(cfg.resume)
    run.logger = MetricLogger(cfg.logger, run_dir, config_dict, meta.get("wandb_run_id"), env.is_main)
    telemetry = PrecisionTelemetry(model, cfg.model, t.seq_len, run.flops_per_token, env.device,
                                   cfg.precision.telemetry_interval, world_size=env.world_size)
    run.precision = PrecisionController(model, plan, telemetry, run.logger, verbose=env.is_main)
    policy = plan.policy_at(0)
    run.logger.log_table("precision", policy.columns(), policy.rows())
    n_params = sum(p.numel() for p in model.parameters())
    _say(env, f"flamia-train: model {cfg.model.name} ({n_params / 1e6:.1f}M params), precision {cfg.precision.name}, "
              f"{env.world_size} rank(s) on {env.device.type}, run_dir {run_dir}")
    _say(env, policy.format_table())
    if len(plan.phases) > 1:
        _say(env, f"precision schedule: {plan.describe()}")
    if context.explicit:
        _say(env, context.describe())
    if run.resumed_from is not None:
        _say(env, f"resumed from {run.resumed_from} at step {run.state.step}")
    return run
