"""torchrun worker for tests/test_parallel.py: FSDP2 and HSDP steps against a 1-process reference.

Run as `torchrun --nproc_per_node=2 tests/dist_fsdp_worker.py OUT.json`. Every rank
builds the same seeded tiny model; rank 0 also trains an unwrapped copy on the
whole global batch. The sharded models train on a per-rank slice of that batch
with AdamW, fp32 params and reductions; rank 0 writes the per-step losses and
gradient norms of each run to OUT.json for the test to compare.
"""

from __future__ import annotations

import copy
import json
import os
import sys

import torch
import torch.nn.functional as F

from flamia_train.model import GPT, ModelConfig
from flamia_train.parallel import (
    ParallelConfig,
    all_reduce_max,
    all_reduce_mean,
    barrier,
    broadcast_object,
    build_mesh,
    init_distributed,
    parallelize,
    shutdown,
)

CFG = ModelConfig(vocab_size=512, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, qk_norm=True)
STEPS, BATCH, SEQ = 2, 4, 32


def loss_fn(model, tokens):
    logits = model(tokens[:, :-1])  # (B, S, V)
    return F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())


def grad_norm(model) -> float:
    # FSDP2 gradients are DTensors: full_tensor() gathers each one before the norm.
    sq = sum((p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).double().pow(2).sum()
             for p in model.parameters())
    return float(sq.sqrt())


def train(model, batches, shard=None) -> dict:
    """STEPS AdamW steps; `shard` = (index, count) picks this rank's rows of each global batch."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    losses, norms = [], []
    for tokens in batches:
        if shard is not None:
            tokens = tokens.chunk(shard[1])[shard[0]]
        loss = loss_fn(model, tokens)
        loss.backward()
        losses.append(float(all_reduce_mean(loss.detach().clone())) if shard else loss.item())
        norms.append(grad_norm(model))
        opt.step()
        opt.zero_grad()
    return {"loss": losses, "grad_norm": norms}


def main(out_path: str) -> None:
    env = init_distributed("cpu")
    assert init_distributed("cpu") == env  # idempotent
    torch.manual_seed(0)
    reference = GPT(CFG)
    batches = [torch.randint(0, CFG.vocab_size, (BATCH, SEQ + 1)) for _ in range(STEPS)]
    result = {"world_size": env.world_size}
    if env.is_main:
        result["reference"] = train(copy.deepcopy(reference), batches)
    runs = {"fsdp": ParallelConfig(param_dtype="fp32"),
            "hsdp": ParallelConfig(param_dtype="fp32", dp_replicate=2, activation_checkpoint="selective")}
    for name, pcfg in runs.items():
        mesh = build_mesh(env, pcfg)
        model = parallelize(copy.deepcopy(reference), pcfg, mesh)
        result[name] = train(model, batches, shard=(env.rank, env.world_size))
        result[name]["mesh"] = list(mesh.mesh_dim_names)
    # The helpers the trainer relies on, checked across real ranks.
    result["max_rank"] = int(all_reduce_max(torch.tensor(float(env.rank))))
    result["broadcast"] = broadcast_object({"from": env.rank})
    barrier()
    if env.is_main:
        with open(out_path, "w") as f:
            json.dump(result, f)
    shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
    # On a loaded 2-core machine a rank sometimes aborts during interpreter teardown, after
    # shutdown() returned ("terminate called without an active exception": a native thread
    # still joinable at exit). The work is done and checked by then: leave without teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
