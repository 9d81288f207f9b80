"""Process group, mesh and FSDP2: one process here, two through torchrun (tests/dist_fsdp_worker.py)."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from dist_fsdp_worker import CFG, grad_norm, loss_fn
from torch.utils._python_dispatch import TorchDispatchMode

from flamia_train.errors import ConfigError
from flamia_train.model import GPT
from flamia_train.parallel import (
    RESHARD_POLICIES,
    ParallelConfig,
    all_reduce_max,
    all_reduce_mean,
    broadcast_object,
    build_mesh,
    init_distributed,
    parallelize,
    reshard_blocks,
    shard_group_size,
    shutdown,
    validate_parallel,
)

WORKER = Path(__file__).with_name("dist_fsdp_worker.py")
FP32 = ParallelConfig(param_dtype="fp32")


@pytest.fixture(scope="module")
def env():
    env = init_distributed("cpu")
    yield env
    shutdown()


def _model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(CFG)


def _batch() -> torch.Tensor:
    return torch.randint(0, CFG.vocab_size, (2, 33))


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _loss_and_grads(model, batch):
    loss = loss_fn(model, batch)
    loss.backward()
    return loss.detach(), {n: _full(p.grad) for n, p in model.named_parameters()}


def test_init_distributed_single_process(env):
    assert dist.is_initialized() and dist.get_backend() == "gloo"
    assert (env.rank, env.world_size, env.local_rank, env.device.type, env.is_main) == (0, 1, 0, "cpu", True)
    assert init_distributed("cpu") == env  # idempotent
    t = torch.randn(3)
    assert torch.equal(all_reduce_mean(t.clone()), t) and torch.equal(all_reduce_max(t.clone()), t)
    assert broadcast_object({"a": 1}) == {"a": 1}


def test_shutdown_is_safe_twice():
    # A separate interpreter: this module's process group stays up for the other tests.
    code = ("from flamia_train.parallel import init_distributed, shutdown\n"
            "import torch.distributed as dist\n"
            "env = init_distributed('auto'); assert env.world_size == 1 and dist.is_initialized()\n"
            "shutdown(); shutdown(); assert not dist.is_initialized()\n")
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, env=clean)


def test_parallelize_world1_matches_unwrapped(env):
    ref = _model()
    sharded = parallelize(copy.deepcopy(ref), FP32, build_mesh(env, FP32))
    assert [n for n, _ in sharded.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert sharded.output.weight is sharded.tok_embeddings.weight  # tying survives sharding
    batch = _batch()
    ref_loss, ref_grads = _loss_and_grads(ref, batch)
    loss, grads = _loss_and_grads(sharded, batch)
    assert torch.equal(loss, ref_loss)
    for name, g in ref_grads.items():
        assert torch.equal(grads[name], g), name


def test_bf16_params_keep_fp32_master_weights(env):
    pcfg = ParallelConfig(param_dtype="bf16")
    ref = _model()
    model = parallelize(copy.deepcopy(ref), pcfg, build_mesh(env, pcfg))
    batch = _batch()
    assert model(batch[:, :-1]).dtype == torch.bfloat16
    loss, grads = _loss_and_grads(model, batch)
    ref_loss, _ = _loss_and_grads(ref, batch)
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())
    torch.testing.assert_close(loss, ref_loss, rtol=2e-2, atol=2e-2)


def test_reshard_policies_change_no_number(env):
    """"default" keeps one rank's gathered block parameters through the backward (nothing to save by
    freeing them, a second gather to pay); any policy gives the same loss and gradients, bit for
    bit, over two accumulated micro-batches."""
    assert (reshard_blocks("default", 1), reshard_blocks("default", 2)) == (False, True)
    assert (reshard_blocks("always", 1), reshard_blocks("never", 8)) == (True, False)
    ref = _model()
    batches = [_batch(), _batch()]
    results = {}
    for policy in RESHARD_POLICIES:
        pcfg = ParallelConfig(param_dtype="bf16", reshard_after_forward=policy)
        mesh = build_mesh(env, pcfg)
        assert shard_group_size(mesh) == 1
        model = parallelize(copy.deepcopy(ref), pcfg, mesh)
        # FSDP2 keeps a post-forward mesh exactly for the groups that reshard after forward
        blocks_reshard = model.layers[0]._get_fsdp_state()._fsdp_param_group.post_forward_mesh_info is not None
        root_reshards = model._get_fsdp_state()._fsdp_param_group.post_forward_mesh_info is not None
        assert (blocks_reshard, root_reshards) == (policy == "always", policy == "always"), policy
        losses = [loss_fn(model, b) for b in batches]
        for loss in losses:
            loss.backward()
        results[policy] = (torch.stack(losses).detach(), {n: _full(p.grad) for n, p in model.named_parameters()})
    loss0, grads0 = results["always"]
    for policy in ("default", "never"):
        loss, grads = results[policy]
        assert torch.equal(loss, loss0), policy
        for name, g in grads0.items():
            assert torch.equal(grads[name], g), (policy, name)


class _CountOps(TorchDispatchMode):
    """Counts aten ops by name (to see what a backward recomputes)."""

    def __init__(self):
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def test_activation_checkpointing_modes_same_gradients(env):
    batch = _batch()
    ref = _model()
    results = {}
    for mode in ("none", "selective", "full"):
        pcfg = dataclasses.replace(FP32, activation_checkpoint=mode)
        model = parallelize(copy.deepcopy(ref), pcfg, build_mesh(env, pcfg))
        loss = loss_fn(model, batch)
        with _CountOps() as ops:
            loss.backward()
        grads = {n: _full(p.grad) for n, p in model.named_parameters()}
        results[mode] = (loss.detach(), grads, ops.counts)
    loss0, grads0, ops0 = results["none"]
    for mode in ("selective", "full"):
        loss, grads, _ = results[mode]
        assert torch.equal(loss, loss0), mode
        assert len(grads) == len(grads0)
        for g, g0 in zip(grads.values(), grads0.values(), strict=True):
            assert torch.equal(g, g0), mode
    # Selective recomputes norms and activations but saves every matmul; full redoes matmuls too.
    assert ops0.get("aten.rsqrt", 0) == 0
    assert results["selective"][2]["aten.rsqrt"] > 0
    assert results["selective"][2]["aten.mm"] == ops0["aten.mm"]
    assert results["full"][2]["aten.mm"] > ops0["aten.mm"]


def test_checkpointed_state_dict_keeps_model_names(env):
    pcfg = dataclasses.replace(FP32, activation_checkpoint="full")
    model = parallelize(_model(), pcfg, build_mesh(env, pcfg))
    assert set(model.state_dict()) == set(_model().state_dict())
    model.set_attention_specs(["bf16"] * CFG.n_layers)  # reaches the blocks through the wrapper


def test_meta_device_parallelize_then_init_equals_eager(env):
    with torch.device("meta"):
        model = GPT(CFG)
    model = parallelize(model, FP32, build_mesh(env, FP32))
    model.to_empty(device=env.device)
    torch.manual_seed(3)
    model.init_weights()
    eager = _model()
    torch.manual_seed(3)
    eager.init_weights()
    for name, value in eager.state_dict().items():
        assert torch.equal(_full(model.state_dict()[name]), value), name
    batch = _batch()
    torch.testing.assert_close(loss_fn(model, batch), loss_fn(eager, batch), rtol=0, atol=0)


def test_bad_parallel_config(env):
    with pytest.raises(ConfigError) as err:
        build_mesh(env, ParallelConfig(dp_replicate=2))  # world size 1
    assert err.value.key == "parallel.dp_replicate"
    for field, value in [("activation_checkpoint", "some"), ("param_dtype", "fp16"), ("device", "tpu"),
                         ("dp_replicate", 0), ("reshard_after_forward", "sometimes")]:
        with pytest.raises(ConfigError) as err:
            validate_parallel(ParallelConfig(**{field: value}))
        assert err.value.key == f"parallel.{field}"


@pytest.mark.slow
def test_compile_per_block_matches_eager(env):
    batch = _batch()
    ref = _model()
    ref_loss, ref_grads = _loss_and_grads(ref, batch)
    pcfg = dataclasses.replace(FP32, compile=True, activation_checkpoint="selective")
    loss, grads = _loss_and_grads(parallelize(copy.deepcopy(ref), pcfg, build_mesh(env, pcfg)), batch)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-5)
    # Same order, names differ by the checkpoint wrapper's level.
    for g, g_ref in zip(grads.values(), ref_grads.values(), strict=True):
        torch.testing.assert_close(g, g_ref, rtol=1e-4, atol=1e-5)


@pytest.mark.distributed
def test_two_process_fsdp_and_hsdp_match_one_process(tmp_path):
    out = tmp_path / "result.json"
    launcher_keys = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    clean = {k: v for k, v in os.environ.items() if k not in launcher_keys}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(WORKER), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=clean)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == 2 and result["max_rank"] == 1 and result["broadcast"] == {"from": 0}
    ref = result["reference"]
    assert result["fsdp"]["mesh"] == ["dp_shard"]
    assert result["hsdp"]["mesh"] == ["dp_replicate", "dp_shard"]
    for run in ("fsdp", "hsdp"):
        assert result[run]["loss"] == pytest.approx(ref["loss"], rel=1e-5), run
        assert result[run]["grad_norm"] == pytest.approx(ref["grad_norm"], rel=1e-4), run
    assert ref["loss"][1] < ref["loss"][0]  # the step trained


def test_grad_norm_helper_counts_every_parameter():
    model = _model()
    loss_fn(model, _batch()).backward()
    expected = torch.cat([p.grad.flatten() for p in model.parameters()]).double().norm()
    assert grad_norm(model) == pytest.approx(float(expected), rel=1e-9)
