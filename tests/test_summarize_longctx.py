"""scripts/device/summarize_longctx.py (issue 5): per-stage rows from metrics.jsonl and the trainer's log,
stages never reached (out of memory, time box), and the activation-memory estimate against what the
bf16 model really saves for its backward (saved_tensors_hooks on the CPU)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from flamia_train.metrics import Throughput
from flamia_train.model import GPT, MODEL_SHAPES

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "device"))
import summarize_longctx as summ  # noqa: E402

SCHEDULE = """context schedule: 32768 tokens/step
  stage 0: steps 0-3 seq_len 2048 micro_batch 4 accum 4 rope_theta 10000
  stage 1: steps 4-7 seq_len 8192 micro_batch 1 accum 4 rope_theta 100000
  stage 2: steps 8-11 seq_len 32768 micro_batch 1 accum 1 rope_theta 500000
"""


def write_run(tmp_path: Path, label: str, steps: int, tail: str) -> tuple[Path, Path]:
    """metrics.jsonl as the trainer writes it (tokens/s window restarted at each stage) and its log."""
    run_dir = tmp_path / label
    run_dir.mkdir()
    tp, lines = Throughput(), []
    for step in range(1, steps + 1):
        stage = (step - 1) // 4
        if (step - 1) % 4 == 0:
            tp = Throughput()
        tp.update(32768, 1.0 + stage)
        row = {"step": step, "loss": 10.0 - step / 10, "tokens_per_s": tp.tokens_per_s(), "stage": stage,
               "seq_len": (2048, 8192, 32768)[stage], "peak_memory_gb": 20.0 + 10 * stage}
        lines.append(json.dumps({k: v for k, v in row.items() if v is not None}))
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    log = tmp_path / f"{label}.log"
    log.write_text("flamia-train: model gpt-1b (995.2M params), precision fp8, 1 rank(s) on cuda\n" + SCHEDULE + tail)
    return run_dir, log


def test_stages_reached_oom_and_time_box(tmp_path, capsys):
    full = write_run(tmp_path, "fp8-full", 12, "close_out: exit 0 after 70 s\n")
    oom = write_run(tmp_path, "fp8-none", 8, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB\n"
                                             "close_out: exit 1 after 50 s\n")
    slow = write_run(tmp_path, "fp8-selective", 10, "close_out: exit 124 after 150 s\n")
    args = ["--gpu-gb", "140.4", "--json", str(tmp_path / "lc.json")]
    for label, (run_dir, log) in (("fp8-full", full), ("fp8-none", oom), ("fp8-selective", slow)):
        args += ["--run", label, "fp8", label.split("-")[1], str(run_dir), str(log)]
    result = summ.main(args)
    out = capsys.readouterr().out
    full_rows, oom_rows, slow_rows = (r["stages"] for r in result["runs"])
    assert [r["status"] for r in full_rows] == ["ok", "ok", "ok"]
    assert [r["micro_batch"] for r in full_rows] == [4, 1, 1] and full_rows[2]["accum"] == 1
    assert full_rows[2]["tokens_per_s"] == pytest.approx(32768 / 3.0) and full_rows[2]["peak_gib"] == 40.0
    assert oom_rows[2]["status"] == "not reached (out of memory; last logged step 8)"
    assert slow_rows[2]["status"] == "stopped at step 10 (time box)"
    assert "| fp8-full | fp8 | full | 2 | 9–12 | 32768 | 1 × 1 | 10,923 | 40.0 |" in out
    assert "runs that completed their last stage (up to 32768 tokens): fp8-full" in out
    assert "CUDA out of memory" in out  # the error line of the failed run
    est = full_rows[2]["estimate_gib"]
    assert est["total"] == pytest.approx(est["state"] + est["activations"] + est["loss"])
    none32k = summ.estimate_gib(result["shape"], "fp8", "none", 1, 32768)
    assert 60 < none32k["total"] < 100 and est["total"] < none32k["total"] / 2  # gpt-1b: ~81 vs ~33 GiB
    assert summ.estimate_gib(result["shape"], "fp8", "selective", 1, 32768) is None
    assert json.loads((tmp_path / "lc.json").read_text())["runs"][0]["label"] == "fp8-full"


def test_activation_estimate_matches_the_saved_tensors_of_the_bf16_model():
    """layer_bytes_per_token follows the code: count what one bf16 block saves for its backward."""
    cfg = replace(MODEL_SHAPES["gpt-1b"], d_model=256, n_heads=4, n_kv_heads=2, n_layers=1, vocab_size=512)
    torch.manual_seed(0)
    model = GPT(cfg).to(torch.bfloat16)
    seq = 128
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params and not t.is_complex():  # weights; the RoPE table
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    tokens = torch.randint(0, cfg.vocab_size, (1, seq))
    h = model.tok_embeddings(tokens).detach().requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.layers[0](h, model._rope(seq, tokens.device))
    shape = {"d": cfg.d_model, "heads": cfg.n_heads, "kv_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim,
             "ffn": cfg.ffn_dim}
    measured = sum(saved.values()) / seq
    assert measured == pytest.approx(summ.layer_bytes_per_token(shape, "bf16"), rel=0.03)
