"""Context schedules through the CLI on the tiny model (issue 5's CPU acceptance), and eval_context.

One seq-warmup run (128 -> 384 over 4 steps, then 384; document masking on) is shared:
its per-step stage / seq_len records, a resume from the middle of the ramp stage that must
be bit-exact, scripts/eval_context.py on its checkpoint, and the parallel-vs-autoregressive
gap telling a causally safe model from leaky ones.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import flamia_kernels
import pytest
import torch
from flamia_kernels import reference
from test_train_e2e import ROOT, assert_same_weights, cli, exported, train_losses

from flamia_train import data
from flamia_train.config import register_configs, to_dataclass, validate
from flamia_train.context_eval import load_model, parallel_vs_autoregressive

STAGES = ["schedule.context.unit=step", "schedule.context.stages=[{start:0,seq_len:128,ramp_to:384},"
          "{start:4,seq_len:384}]", "train.document_masking=true", "train.eval_interval=0", "checkpoint.keep=5",
          "train.steps=6", "schedule.warmup_steps=2"]
LENGTHS = [128, 128, 256, 256, 384, 384]  # the ramp snapped to lengths dividing 1536 tokens/step


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ctx_corpus") / "stdlib"
    data.prepare_default_corpus(out, vocab_size=512, max_corpus_mb=1.0, seed=0)
    return out


@pytest.fixture(scope="module")
def warmup_run(tmp_path_factory, corpus):
    run_dir = tmp_path_factory.mktemp("ctx") / "full"
    proc = cli(run_dir, corpus, *STAGES, "checkpoint.interval=3")
    return run_dir, proc


def records(run_dir: Path) -> list[dict]:
    return [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def test_seq_warmup_run_logs_stage_seq_len_and_constant_tokens(warmup_run):
    run_dir, proc = warmup_run
    rows = records(run_dir)
    assert [r["seq_len"] for r in rows] == LENGTHS and [r["stage"] for r in rows] == [0, 0, 0, 0, 1, 1]
    assert [r["tokens_seen"] for r in rows] == [1536 * (i + 1) for i in range(6)]
    assert all(r["peak_memory_gb"] > 0 for r in rows)
    assert "context schedule: 1536 tokens/step" in proc.stderr
    assert "stage 1: steps 4-5 seq_len 384 micro_batch 1 accum 4" in proc.stderr


def test_resume_mid_stage_is_bit_exact(warmup_run, tmp_path, corpus):
    run_dir, _ = warmup_run
    step3 = run_dir / "checkpoints" / "step_00000003"  # inside the ramp stage, one step before its end
    proc = cli(tmp_path / "resumed", corpus, *STAGES, "checkpoint.interval=0", f"resume={step3}")
    assert "resumed from" in proc.stderr
    assert train_losses(run_dir)[3:] == train_losses(tmp_path / "resumed")
    assert [r["seq_len"] for r in records(tmp_path / "resumed")] == LENGTHS[3:]
    assert_same_weights(exported(run_dir), exported(tmp_path / "resumed"))


def test_eval_context_cli_prints_position_buckets_and_the_gap(warmup_run, corpus, tmp_path):
    run_dir, _ = warmup_run
    out = tmp_path / "eval.json"
    cmd = [sys.executable, "scripts/eval_context.py", str(run_dir / "checkpoints" / "step_00000006"),
           "--data-path", str(corpus), "--seq-len", "256", "--batches", "1", "--micro-batch", "2",
           "--ar-seqs", "1", "--ar-len", "128", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "positions [128, 256): loss" in proc.stdout and "max_token_gap" in proc.stdout
    result = json.loads(out.read_text())
    assert [(b["start"], b["end"]) for b in result["buckets"]] == [(0, 16), (16, 32), (32, 64), (64, 128),
                                                                   (128, 256)]
    assert result["ar"][0]["max_token_gap"] < 1e-4  # bf16 SDPA, causal: the two agree


def _attention(**forced):
    """flamia_attention through the PyTorch reference, with `forced` arguments (the leaks)."""
    def attention(q, k, v, spec="bf16", causal=True, safeguards=True, doc_ids=None):
        kw = {"causal": causal, "safeguards": safeguards, "doc_ids": doc_ids, **forced}
        return reference.attention(q, k, v, spec, **kw)
    return attention


def test_parallel_vs_autoregressive_gap_catches_leaky_models(warmup_run, corpus, monkeypatch):
    run_dir, _ = warmup_run
    model = load_model(run_dir / "export" / "model_step00000006.safetensors")
    model.set_attention_specs(["fp8"] * len(model.layers))
    cfg = data.DataConfig(path=str(corpus), tokenizer=str(corpus / "tokenizer.model"))
    inputs, targets = data.build_loader(cfg, data.build_tokenizer(cfg), "heldout", 128, 1, 0, 1).next_batch()
    row = torch.cat([inputs[0], targets[0, -1:]])
    gaps = {}
    for name, forced in (("safe", {}), ("leaky_fp8", {"safeguards": False}), ("non_causal", {"causal": False})):
        monkeypatch.setattr(flamia_kernels, "flamia_attention", _attention(**forced))
        gaps[name] = parallel_vs_autoregressive(model, row, flamia_kernels.SEQ_BLOCK)["max_token_gap"]
    assert gaps["safe"] <= 1e-5, gaps
    assert gaps["leaky_fp8"] > max(1e-4, 10 * gaps["safe"]), gaps  # safeguards off: token-block scales leak
    assert gaps["non_causal"] > gaps["leaky_fp8"], gaps


def test_bench_context_groups_records_per_stage(warmup_run):
    spec = importlib.util.spec_from_file_location("bench_context", ROOT / "scripts" / "bench_context.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    run_dir, _ = warmup_run
    stages = bench.per_stage([json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()])
    assert [(s["stage"], s["steps"], s["seq_len"]) for s in stages] == [(0, [1, 4], [128, 256]), (1, [5, 6], [384])]
    losses = train_losses(run_dir)
    assert stages[1]["loss_last"] == losses[-1] and stages[0]["loss_mean"] == pytest.approx(sum(losses[:4]) / 4)


def test_document_masking_with_a_quantized_spec_validates(tmp_path):
    """The FLAMIA kernels take doc ids, so validate no longer refuses this combination."""
    from hydra import compose, initialize_config_dir

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = to_dataclass(compose(config_name="train", overrides=[
            "precision.default.attention=fp8", "train.document_masking=true", f"run_dir={tmp_path}/r"]))
    validate(cfg)
    assert cfg.train.document_masking and cfg.precision.default.attention == "fp8"
