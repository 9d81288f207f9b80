"""Process group, device mesh and FSDP2: everything distributed lives here, none of it in the model.

    torchrun env (or a lone `python`) ─▶ init_distributed() ─▶ DistEnv
    DistEnv + ParallelConfig ─▶ build_mesh() ─▶ ("dp_shard",) or ("dp_replicate", "dp_shard")
    GPT (meta or real) ─▶ parallelize(): activation checkpointing ─▶ compile ─▶ fully_shard

A process group always exists, even for a single process (world size 1), so the
trainer, the checkpointer and the tests run one code path: FSDP2 everywhere.

Order for a large model (no full copy in memory on any rank)::

    with torch.device("meta"):
        model = GPT(cfg, specs)
    model = parallelize(model, pcfg, mesh)     # shards meta parameters
    model.to_empty(device=env.device)          # allocates each rank's shard only
    model.init_weights()                       # fills the shards (seed first)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from flamia_train.errors import ConfigError

AC_MODES = ("none", "selective", "full")
RESHARD_POLICIES = ("default", "always", "never")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class ParallelConfig:
    """How the model is spread over processes; the keys under `parallel:` in configs/train.yaml."""

    dp_replicate: int = 1  # HSDP replicas on the outer mesh dim; 1 = plain FSDP over all ranks
    activation_checkpoint: str = "none"  # none | selective (save matmul/attention outputs) | full
    compile: bool = False  # torch.compile each block (after checkpointing, before sharding)
    param_dtype: str = "bf16"  # bf16 | fp32: FSDP2 MixedPrecisionPolicy dtype of unsharded params
    reduce_dtype: str = "fp32"  # bf16 | fp32: dtype of the gradient reduce-scatter / all-reduce
    reshard_after_forward: str = "default"  # default | always | never: free gathered block params after forward
    device: str = "auto"  # auto (cuda if present) | cpu | cuda


def validate_parallel(cfg: ParallelConfig, world_size: int | None = None) -> None:
    """Raise ConfigError (key `parallel.<field>`) for a value parallelize() cannot use."""
    if cfg.activation_checkpoint not in AC_MODES:
        raise ConfigError("parallel.activation_checkpoint", cfg.activation_checkpoint, f"one of {AC_MODES}")
    for key in ("param_dtype", "reduce_dtype"):
        if getattr(cfg, key) not in DTYPES:
            raise ConfigError(f"parallel.{key}", getattr(cfg, key), f"one of {tuple(DTYPES)}")
    if cfg.device not in DEVICES:
        raise ConfigError("parallel.device", cfg.device, f"one of {DEVICES}")
    if cfg.reshard_after_forward not in RESHARD_POLICIES:
        raise ConfigError("parallel.reshard_after_forward", cfg.reshard_after_forward, f"one of {RESHARD_POLICIES}")
    if cfg.dp_replicate < 1 or (world_size is not None and world_size % cfg.dp_replicate):
        rule = "a positive integer" if world_size is None else f"a divisor of world size {world_size}"
        raise ConfigError("parallel.dp_replicate", cfg.dp_replicate, f"must be {rule}")


@dataclass
class DistEnv:
    """Where this process sits: ranks, sizes, its device and the process-group backend."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _resolve_device(device: str, local_rank: int) -> torch.device:
    if device not in DEVICES:
        raise ConfigError("parallel.device", device, f"one of {DEVICES}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("parallel.device", device, "CUDA is not available on this machine: use cpu or auto")
    if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    return torch.device("cuda", local_rank)


def init_distributed(device: str = "auto") -> DistEnv:
    """Join (or create) the default process group and return this process's DistEnv.

    Under torchrun, RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR come from the
    environment; a plain `python` process becomes world size 1 on an in-memory
    store. Backend: nccl for CUDA tensors (gloo alongside for CPU ones), gloo on CPU.
    Calling it again returns the same environment.
    """
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if dist.is_initialized():
        on_cuda = "nccl" in str(dist.get_backend())
        dev = torch.device("cuda", local_rank) if on_cuda else torch.device("cpu")
    else:
        dev = _resolve_device(device, local_rank)
    env = DistEnv(
        rank=int(os.environ.get("RANK", 0)),
        local_rank=local_rank,
        world_size=int(os.environ.get("WORLD_SIZE", 1)),
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
        device=dev,
        backend="cpu:gloo,cuda:nccl" if dev.type == "cuda" else "gloo",
    )
    if dist.is_initialized():
        env.rank, env.world_size = dist.get_rank(), dist.get_world_size()
        return env
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if "MASTER_ADDR" in os.environ:
        dist.init_process_group(env.backend, rank=env.rank, world_size=env.world_size,
                                device_id=dev if dev.type == "cuda" else None)
    else:
        # No launcher: a one-rank group on an in-process store, so FSDP2 and DCP still apply.
        env.rank, env.world_size = 0, 1
        dist.init_process_group(env.backend, store=dist.HashStore(), rank=0, world_size=1)
    return env


def shutdown() -> None:
    """Destroy the default process group; a no-op when there is none."""
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _all_reduce(tensor: torch.Tensor, op) -> torch.Tensor:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=op)
    return tensor


def all_reduce_mean(tensor: torch.Tensor) -> torch.Tensor:
    """Average `tensor` over all ranks, in place; returns it. (gloo has no AVG: SUM / world.)"""
    _all_reduce(tensor, dist.ReduceOp.SUM)
    if dist.is_initialized():
        tensor.div_(dist.get_world_size())
    return tensor


def all_reduce_max(tensor: torch.Tensor) -> torch.Tensor:
    """Element-wise maximum of `tensor` over all ranks, in place; returns it."""
    return _all_reduce(tensor, dist.ReduceOp.MAX)


def broadcast_object(obj, src: int = 0):
    """Return rank `src`'s `obj` on every rank (any picklable object)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def build_mesh(env: DistEnv, cfg: ParallelConfig) -> DeviceMesh:
    """1-D ("dp_shard",) mesh for FSDP, 2-D ("dp_replicate", "dp_shard") for HSDP."""
    validate_parallel(cfg, env.world_size)
    if cfg.dp_replicate == 1:
        return init_device_mesh(env.device.type, (env.world_size,), mesh_dim_names=("dp_shard",))
    shape = (cfg.dp_replicate, env.world_size // cfg.dp_replicate)
    return init_device_mesh(env.device.type, shape, mesh_dim_names=("dp_replicate", "dp_shard"))


# Selective checkpointing keeps what is costly to recompute (matmuls, attention) and
# recomputes the cheap, memory-hungry rest (norms, RoPE, SwiGLU activations, casts).
_SAVE_OPS = {
    torch.ops.aten.mm.default,
    torch.ops.aten.addmm.default,
    torch.ops.aten.bmm.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_cudnn_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
}


def _selective_policy(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in _SAVE_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def _apply_activation_checkpointing(block: nn.Module, mode: str) -> nn.Module:
    """The block wrapped for recomputation (or itself for "none").

    A wrapper module, not the hook-based composable API: FSDP's hooks then sit outside the
    recomputed region and torch.compile traces the checkpoint. Parameter names gain a
    `_checkpoint_wrapped_module.` level; state_dict() and DCP's get_model_state_dict strip it.
    """
    if mode == "none":
        return block
    if mode == "full":
        return checkpoint_wrapper(block, preserve_rng_state=False)
    policy = partial(create_selective_checkpoint_contexts, _selective_policy)
    return checkpoint_wrapper(block, preserve_rng_state=False, context_fn=policy)


def parallelize(model: nn.Module, cfg: ParallelConfig, mesh: DeviceMesh) -> nn.Module:
    """Apply activation checkpointing → torch.compile → FSDP2 to each block, then FSDP2 to the root.

    Without checkpointing, parameter names stay the model's own; with it, each block sits
    in a checkpoint wrapper (see _apply_activation_checkpointing) and attribute access
    such as `model.layers[i].attention` still reaches the block.

    `model` needs a `layers` ModuleList of blocks (GPT has one). Works on a model on
    `meta` (then `to_empty()` + `init_weights()`, see the module docstring) or on one
    with real weights, which each rank must hold identically: its shard is kept.
    A 2-D mesh replicates over "dp_replicate" and shards over "dp_shard" (HSDP).
    Returns the same module, modified in place.
    """
    validate_parallel(cfg, mesh.size())
    mp = MixedPrecisionPolicy(param_dtype=DTYPES[cfg.param_dtype], reduce_dtype=DTYPES[cfg.reduce_dtype])
    reshard = reshard_blocks(cfg.reshard_after_forward, shard_group_size(mesh))
    for i, block in enumerate(model.layers):
        block = model.layers[i] = _apply_activation_checkpointing(block, cfg.activation_checkpoint)
        if cfg.compile:
            block.compile()  # in place: parameter names stay those of the eager block
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
    # The root group holds the embedding, final norm and LM head (one shared tensor when tied). The
    # backward starts with the LM head, so freeing it after the forward would only gather it again.
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=cfg.reshard_after_forward == "always")
    return model


def shard_group_size(mesh: DeviceMesh) -> int:
    """Ranks one parameter is sharded over: the "dp_shard" dim of an HSDP mesh, else the whole mesh."""
    names = mesh.mesh_dim_names or ()
    return mesh["dp_shard"].size() if "dp_shard" in names else mesh.size()


def reshard_blocks(policy: str, shard_ranks: int) -> bool:
    """Whether each block frees its gathered parameters after its forward (FSDP2 reshard_after_forward).

    "default": yes when they are sharded over 2+ ranks (the memory FSDP exists to save), no over one
    rank, where the "shard" is the whole tensor and resharding saves only the bf16 copy while the
    backward pays a second gather (a copy-in and copy-out of every parameter: in bench_train's
    gpt-1b profile at 8k the cast and copy kernels took ~40 ms of a ~380 ms step). "always" /
    "never" force it (never: the bf16 parameters of every block stay gathered until the backward)."""
    if policy == "default":
        return shard_ranks > 1
    return policy == "always"
