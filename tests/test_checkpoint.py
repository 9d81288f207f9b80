"""Checkpoints in one gloo process: round trip, atomicity, pruning, corruption, mismatches, export."""
import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch import nn

from flamia_train.checkpoint import (
    CheckpointConfig,
    CheckpointManager,
    RNGState,
    load_safetensors,
)
from flamia_train.errors import CheckpointError
from flamia_train.schedules import LRSchedule, ScheduleConfig

MODEL_CFG = {"vocab": 32, "d_model": 8, "n_layers": 1}


@pytest.fixture(scope="module", autouse=True)
def process_group(tmp_path_factory):
    """A 1-process gloo group, as parallel.init_distributed would create it."""
    if dist.is_initialized():
        yield
        return
    store = dist.FileStore(str(tmp_path_factory.mktemp("pg") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class Tiny(nn.Module):
    def __init__(self, d_model: int = 8, vocab: int = 32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d_model)
        self.mid = nn.Linear(d_model, d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.emb.weight  # tied, like GPT's optional tied embeddings

    def forward(self, tokens):
        return self.head(torch.relu(self.mid(self.emb(tokens))))


class Counter:
    """A stand-in for the data loader's Stateful."""

    def __init__(self, position: int = 0):
        self.position = position

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]


def _trained(steps: int = 2):
    model = Tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        tokens = torch.randint(0, 32, (2, 5))
        nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten()).backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def _manager(tmp_path: Path, keep: int = 3, run: str = "run") -> CheckpointManager:
    return CheckpointManager(CheckpointConfig(keep=keep), tmp_path / run, 0, 1, dist.barrier, MODEL_CFG)


def _save(mgr: CheckpointManager, step: int, model=None, opt=None) -> Path:
    if model is None:
        model, opt = _trained(1)
    sched = LRSchedule(ScheduleConfig(warmup_steps=2), 1e-3, 100)
    return mgr.save(step, model, opt, {"sched": sched, "loader": Counter(step)}, {"run_id": "r1"},
                    {"rng": RNGState(seed=7, rank=0)})


def _draws():
    return torch.rand(3).tolist(), random.random(), np.random.rand(2).tolist()


def test_round_trip_restores_model_optimizer_extras_and_rng(tmp_path):
    mgr = _manager(tmp_path)
    model, opt = _trained()
    sched = LRSchedule(ScheduleConfig(warmup_steps=2), 1e-3, 100)
    path = mgr.save(40, model, opt, {"sched": sched, "loader": Counter(1234)}, {"run_id": "r1"},
                    {"rng": RNGState(seed=7, rank=0)})
    expected_draws = _draws()
    assert path == tmp_path / "run" / "checkpoints" / "step_00000040"
    assert not list(path.parent.glob("*.tmp-*"))

    fresh, fresh_opt = _trained(1)  # different weights and optimizer moments
    loader = Counter()
    _draws()  # move every RNG away from the saved state
    meta = mgr.load(path, fresh, fresh_opt, {"sched": sched, "loader": loader}, {"rng": RNGState(7, 0)})
    assert meta["step"] == 40 and meta["run_id"] == "r1" and meta["model"] == MODEL_CFG
    assert meta["world_size"] == 1 and meta["format_version"] >= 1
    assert loader.position == 1234
    assert _draws() == expected_draws
    for (name, p), q in zip(model.named_parameters(), fresh.parameters(), strict=True):
        assert torch.equal(p, q), name
    assert fresh.head.weight is fresh.emb.weight
    for p, q in zip(opt.param_groups[0]["params"], fresh_opt.param_groups[0]["params"], strict=True):
        assert torch.equal(opt.state[p]["exp_avg_sq"], fresh_opt.state[q]["exp_avg_sq"])
        assert float(opt.state[p]["step"]) == float(fresh_opt.state[q]["step"])


def test_existing_step_is_never_overwritten(tmp_path):
    mgr = _manager(tmp_path)
    _save(mgr, 5)
    with pytest.raises(CheckpointError, match="step_00000005"):
        _save(mgr, 5)


def test_incomplete_dirs_are_skipped_with_warning_and_kept(tmp_path):
    mgr = _manager(tmp_path)
    good = _save(mgr, 10)
    tmp_left = shutil.copytree(good, good.parent / "step_00000030.tmp-0badc0de")
    no_meta = shutil.copytree(good, good.parent / "step_00000020")
    (no_meta / "meta.json").unlink()
    with pytest.warns(UserWarning) as caught:
        assert mgr.resolve("auto") == good
    text = " ".join(str(w.message) for w in caught)
    assert "step_00000030.tmp-0badc0de" in text and "step_00000020" in text and "meta.json" in text
    assert tmp_left.is_dir() and no_meta.is_dir()
    assert mgr.resolve("never") is None
    with pytest.raises(CheckpointError, match="step_00000020"):
        mgr.resolve(str(no_meta))


def test_keep_last_n_removes_only_our_old_checkpoints(tmp_path):
    mgr = _manager(tmp_path, keep=2)
    ckpts = mgr.dir
    (ckpts / "notes.txt").write_text("mine")
    (ckpts / "step_7").mkdir()  # not our naming scheme
    foreign = ckpts / "step_00000001"
    foreign.mkdir()  # our naming, but not written by us (no meta.json)
    for step in (2, 3, 4, 5):
        _save(mgr, step)
    names = sorted(p.name for p in ckpts.iterdir())
    assert names == ["notes.txt", "step_00000001", "step_00000004", "step_00000005", "step_7"]


def test_corrupt_checkpoints_skipped_not_deleted(tmp_path):
    mgr = _manager(tmp_path, keep=10)
    model, opt = _trained()
    good = _save(mgr, 1, model, opt)
    truncated = _save(mgr, 2)
    garbage = _save(mgr, 3)
    future = _save(mgr, 4)
    shard = next(truncated.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    (garbage / "meta.json").write_text("{not json")
    meta = json.loads((future / "meta.json").read_text())
    (future / "meta.json").write_text(json.dumps({**meta, "format_version": 999}))

    with pytest.warns(UserWarning) as caught:
        assert mgr.resolve("auto") == good
    text = " ".join(str(w.message) for w in caught)
    for path, why in ((truncated, "truncated"), (garbage, "meta.json"), (future, "999")):
        assert str(path) in text and why in text
        assert path.is_dir()
    with pytest.raises(CheckpointError, match="truncated"):
        mgr.resolve(str(truncated))

    fresh, fresh_opt = _trained(1)
    with pytest.warns(UserWarning):
        meta = mgr.load_latest(fresh, fresh_opt, {"loader": Counter()}, None)
    assert meta["step"] == 1
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), fresh.parameters(), strict=True))


def test_different_model_shape_is_refused_before_loading(tmp_path):
    mgr = _manager(tmp_path)
    path = _save(mgr, 3)
    model, opt = _trained(1)
    before = [p.clone() for p in model.parameters()]
    wider = {**MODEL_CFG, "d_model": 16}
    with pytest.raises(CheckpointError, match=r"d_model: checkpoint 8, current 16"):
        mgr.load(path, model, opt, {}, None, model_config=wider)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_world_size_change_reseeds_rank_state(tmp_path):
    mgr = _manager(tmp_path)
    path = _save(mgr, 9)
    meta = json.loads((path / "meta.json").read_text())
    (path / "meta.json").write_text(json.dumps({**meta, "world_size": 2}))
    shutil.copy(path / "rank_0.pt", path / "rank_1.pt")
    model, opt = _trained(1)
    with pytest.warns(UserWarning, match="re-seeded"):
        mgr.load(path, model, opt, {}, {"rng": RNGState(seed=7, rank=0)})
    first = _draws()
    RNGState(seed=7, rank=0).reseed(9)
    assert _draws() == first  # deterministic from seed + step + rank


def test_unwritable_run_dir(tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("a file, so nothing can be created below it")
    with pytest.raises(CheckpointError, match="not writable"):
        CheckpointManager(CheckpointConfig(), blocker / "run", 0, 1, dist.barrier)


def test_failed_write_keeps_previous_and_removes_own_tmp(tmp_path, monkeypatch):
    mgr = _manager(tmp_path)
    previous = _save(mgr, 1)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(CheckpointError, match="step_00000002.*No space left"):
        _save(mgr, 2)
    monkeypatch.undo()
    assert sorted(p.name for p in mgr.dir.iterdir()) == [previous.name]
    assert mgr.resolve("auto") == previous


def test_export_safetensors_round_trip_and_no_overwrite(tmp_path):
    mgr = _manager(tmp_path)
    model, _ = _trained(1)
    out = mgr.export_safetensors(model, tmp_path / "export" / "model.safetensors")
    state = load_safetensors(out)
    assert set(state) == set(model.state_dict())
    fresh = Tiny()
    fresh.load_state_dict(state)
    assert all(torch.equal(p, q) for p, q in zip(model.state_dict().values(), fresh.state_dict().values(),
                                                  strict=True))
    with pytest.raises(CheckpointError, match="already exists"):
        mgr.export_safetensors(model, out)


def _sharded_worker(rank: int, world: int, root: str) -> None:
    """One FSDP2 rank: train, save, load into a fresh sharded model, export; rank 0 writes the reference."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    root_dir = Path(root)
    dist.init_process_group("gloo", store=dist.FileStore(str(root_dir / "store"), world), rank=rank,
                            world_size=world)

    def build(seed: int):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
        mesh = init_device_mesh("cpu", (world,))
        for layer in (model[0], model[2], model):
            fully_shard(layer, mesh=mesh)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2)

    def full(model):
        return {k: v.full_tensor() for k, v in model.state_dict().items()}

    model, opt = build(seed=0)
    for _ in range(2):
        x = torch.randn(4, 16)  # each rank its own data, as under data parallelism
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    mgr = CheckpointManager(CheckpointConfig(), root_dir / "run", rank, world, dist.barrier, MODEL_CFG)
    path = mgr.save(2, model, opt, {"loader": Counter(77)}, {}, {"rng": RNGState(seed=3, rank=rank)})
    expected = full(model)

    fresh, fresh_opt = build(seed=1)
    loader = Counter()
    mgr.load(path, fresh, fresh_opt, {"loader": loader}, {"rng": RNGState(seed=3, rank=rank)})
    assert loader.position == 77
    for key, value in full(fresh).items():
        assert torch.equal(value, expected[key]), key
    for p, q in zip(opt.param_groups[0]["params"], fresh_opt.param_groups[0]["params"], strict=True):
        assert torch.equal(opt.state[p]["exp_avg"].full_tensor(), fresh_opt.state[q]["exp_avg"].full_tensor())
    out = mgr.export_safetensors(fresh, root_dir / "model.safetensors")
    if rank == 0:
        exported = load_safetensors(out)
        assert all(torch.equal(exported[k], v) for k, v in expected.items())
        torch.save(expected, root_dir / "expected.pt")
    dist.barrier()
    dist.destroy_process_group()
    # gloo can abort in interpreter teardown after the group is gone ("terminate called without an
    # active exception", SIGABRT, seen once in a CI run); every check above has passed by now.
    os._exit(0)


@pytest.mark.distributed
def test_fsdp2_two_ranks_round_trip_then_resume_on_one(tmp_path):
    """2-rank FSDP2 save/load/export, then the same checkpoint resharded into a plain 1-process model."""
    import torch.multiprocessing as mp

    mp.spawn(_sharded_worker, args=(2, str(tmp_path)), nprocs=2, join=True)
    expected = torch.load(tmp_path / "expected.pt")
    mgr = CheckpointManager(CheckpointConfig(), tmp_path / "run", 0, 1, dist.barrier, MODEL_CFG)
    path = mgr.resolve("auto")
    assert path.name == "step_00000002"
    plain = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
    loader = Counter()
    with pytest.warns(UserWarning, match="2 ranks.*re-seeded"):
        meta = mgr.load(path, plain, torch.optim.AdamW(plain.parameters()), {"loader": loader},
                        {"rng": RNGState(seed=3, rank=0)})
    assert meta["world_size"] == 2 and loader.position == 77
    for key, value in plain.state_dict().items():
        assert torch.equal(value, expected[key]), key


def test_checkpoint_of_one_adamw_kernel_resumes_under_another(tmp_path):
    """train.optimizer_impl changes the kernels, not the state: a checkpoint written by the for-loop
    AdamW (the CPU's auto, and foreach's layout too) resumes in the fused one (CUDA's auto since
    session 4) with the same moments and step, and both then take the same next step."""
    from flamia_train.build import optimizer_kernels

    assert optimizer_kernels("auto", True) == {"fused": True}
    assert optimizer_kernels("auto", False) == {"foreach": False}
    assert optimizer_kernels("foreach", True) == {"foreach": True}
    model, opt = _trained()
    path = _save(_manager(tmp_path), 7, model, opt)
    fresh = Tiny()
    fused = torch.optim.AdamW(fresh.parameters(), lr=1e-2, **optimizer_kernels("fused", False))
    sched = LRSchedule(ScheduleConfig(warmup_steps=2), 1e-3, 100)
    _manager(tmp_path).load(path, fresh, fused, {"sched": sched, "loader": Counter()}, {"rng": RNGState(7, 0)})
    for p, q in zip(opt.param_groups[0]["params"], fused.param_groups[0]["params"], strict=True):
        assert torch.equal(opt.state[p]["exp_avg"], fused.state[q]["exp_avg"])
        assert float(opt.state[p]["step"]) == float(fused.state[q]["step"]) == 2
    tokens = torch.randint(0, 32, (2, 5))
    for m, o in ((model, opt), (fresh, fused)):
        nn.functional.cross_entropy(m(tokens).flatten(0, 1), tokens.flatten()).backward()
        o.step()
    for p, q in zip(model.parameters(), fresh.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
