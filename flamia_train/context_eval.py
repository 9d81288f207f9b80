"""Long-context evaluation of a trained model: loss by position, and the parallel-vs-autoregressive gap.

    checkpoint (run_dir/checkpoints/step_N, or an exported .safetensors) ─▶ load_model ─▶ GPT
    held-out rows [B, S] ─▶ position_losses ─▶ loss per log2 bucket of positions
                                               (does loss keep falling as context grows?)
    a few rows [S+1]     ─▶ parallel_vs_autoregressive ─▶ (teacher-forced loss, token-by-token loss)

FLAMIA.md test 7: a causally safe model computes the same loss in one teacher-forced pass
as token by token with growing prefixes; a leak (a scale or mask that lets position i see
later tokens) shows up as a gap, since token by token there is no future to leak from.
Each prefix is right-padded with PAD to a multiple of the kernel block (quantized specs
need it): for a causal model the padding is invisible, for a leaky one it is a different
future. The autoregressive side costs about S²/2 token-forwards for S tokens (prefixes
recomputed, no KV cache), batched by padded length: evaluate a few short sequences.
"""
from __future__ import annotations

import json
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

from flamia_train.data_tokenizer import PAD_ID
from flamia_train.errors import CheckpointError
from flamia_train.model import GPT, MODEL_SHAPES, ModelConfig

TOKENS_PER_FORWARD = 32768  # autoregressive prefixes are batched up to this many tokens per forward


def _newest_meta(run_dir: Path) -> Path | None:
    found = sorted(run_dir.glob("checkpoints/step_*/meta.json"))
    return found[-1] if found else None


def _apply_saved_rope(model: GPT, ckpt: Path, step: int) -> None:
    """Set RoPE as the checkpoint's context schedule had it at `step` (a run may have changed it)."""
    app = ckpt / "app_state.pt"
    if not app.is_file():
        return
    schedule = torch.load(app, weights_only=False).get("context_schedule")
    if not schedule:
        return
    stage = [s for s in schedule["stages"] if s["first"] <= max(step - 1, 0)][-1]
    model.set_rope_theta(stage["rope_theta"])
    rope = stage["rope"]
    model.set_rope_scaling(rope["method"], rope["factor"], rope["original_seq_len"], rope["beta_fast"],
                           rope["beta_slow"])


def load_model(path: str | Path, model_name: str = "") -> GPT:
    """A GPT in fp32 on the CPU with the weights of `path`, in eval mode, RoPE as at that step.

    `path`: a checkpoint directory (its meta.json holds the shape) or a .safetensors export
    (shape from `model_name` in MODEL_SHAPES, else from the newest checkpoint of its run_dir).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    from flamia_train.checkpoint import load_safetensors

    path = Path(path)
    meta_file = path / "meta.json" if path.is_dir() else _newest_meta(path.parent.parent)
    if model_name:
        if model_name not in MODEL_SHAPES:
            raise CheckpointError(f"--model {model_name!r} is not one of {sorted(MODEL_SHAPES)}")
        cfg = MODEL_SHAPES[model_name]
    elif meta_file is not None and meta_file.is_file():
        cfg = ModelConfig(**json.loads(meta_file.read_text())["model"])
    else:
        raise CheckpointError(f"{path}: no meta.json to read the model shape from; pass --model NAME")
    model = GPT(cfg)
    if path.is_dir():
        state = {"model": get_model_state_dict(model)}
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
            warnings.simplefilter("ignore", UserWarning)
            dcp.load(state, checkpoint_id=str(path))
        set_model_state_dict(model, state["model"])
        _apply_saved_rope(model, path, int(json.loads(meta_file.read_text())["step"]))
    elif path.suffix == ".safetensors":
        model.load_state_dict(load_safetensors(path), strict=False)
        if meta_file is not None:
            _apply_saved_rope(model, meta_file.parent, int(json.loads(meta_file.read_text())["step"]))
    else:
        raise CheckpointError(f"{path}: neither a checkpoint directory nor a .safetensors file")
    return model.eval()


def token_losses(model: GPT, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-token next-token loss (nats), fp32 [B, S], of one teacher-forced pass."""
    logits = model(inputs).float()
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)


def log2_buckets(seq_len: int, first: int = 16) -> list[tuple[int, int]]:
    """[0, first), [first, 2·first), ... doubling up to seq_len (the last bucket ends at seq_len)."""
    edges = [0]
    edge = first
    while edge < seq_len:
        edges.append(edge)
        edge *= 2
    edges.append(seq_len)
    return list(zip(edges[:-1], edges[1:], strict=True))


@torch.no_grad()
def loss_by_position(model: GPT, batches, seq_len: int) -> list[dict]:
    """Mean loss per log2 bucket of positions over `batches` of (inputs, targets) [B, seq_len]."""
    total = torch.zeros(seq_len, dtype=torch.float64)  # accumulated on the CPU whatever the model's device
    rows = 0
    for inputs, targets in batches:
        total += token_losses(model, inputs, targets).double().sum(0).cpu()
        rows += inputs.shape[0]
    return [{"start": a, "end": b, "loss": (total[a:b].sum() / (rows * (b - a))).item()}
            for a, b in log2_buckets(seq_len)]


@contextmanager
def _head_only_at(model: GPT, positions: torch.Tensor):
    """Run the LM head of row i only at positions[i]: the logits are (n, 1, V) instead of (n, L, V).

    Token by token, only each prefix's last logits are needed; the head over every padded
    position was most of the cost (a forward pre-hook, so the model itself is untouched).
    """
    def pick(module, args):
        h = args[0]  # (n, L, D_model)
        return (h[torch.arange(h.shape[0], device=h.device), positions.to(h.device)][:, None],)

    handle = model.output.register_forward_pre_hook(pick)
    try:
        yield
    finally:
        handle.remove()


@torch.no_grad()
def parallel_vs_autoregressive(model: GPT, row: torch.Tensor, block: int) -> dict[str, float]:
    """Teacher-forced vs token-by-token loss over the S targets of `row` [S+1].

    Returns parallel_loss and autoregressive_loss (means, nats), gap = |difference of the
    means| and max_token_gap = max over tokens of |difference|: the sharper detector, since
    per-token differences of either sign can cancel in the means.

    Token t's prediction comes from the prefix row[:t+1] alone, right-padded with PAD to a
    multiple of `block`; prefixes of one padded length run as one batch (module docstring).
    """
    inputs, targets = row[:-1], row[1:]
    S = inputs.numel()
    parallel = token_losses(model, inputs[None], targets[None])[0]
    device = row.device  # every index and batch tensor lives with the model's inputs (CPU or CUDA)
    auto = torch.empty(S, dtype=torch.float32, device=device)
    for padded in range(block, S + block, block):
        ends = torch.arange(padded - block, min(padded, S), device=device)  # positions whose prefix pads to `padded`
        chunk = max(1, TOKENS_PER_FORWARD // padded)
        for part in ends.split(chunk):
            batch = torch.full((part.numel(), padded), PAD_ID, dtype=inputs.dtype, device=device)
            for i, t in enumerate(part.tolist()):
                batch[i, : t + 1] = inputs[: t + 1]
            with _head_only_at(model, part):
                logits = model(batch)[:, 0].float()  # (n, V) at each prefix's end
            auto[part] = F.cross_entropy(logits, targets[part], reduction="none")
    par, ar = parallel.mean().item(), auto.mean().item()
    return {"parallel_loss": par, "autoregressive_loss": ar, "gap": abs(ar - par),
            "max_token_gap": (auto - parallel).abs().max().item()}
