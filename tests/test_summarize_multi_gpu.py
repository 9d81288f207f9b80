"""scripts/device/summarize_multi_gpu.py (issue 8): per-step tokens/s rebuilt from the trainer's rolling
tokens/s, scaling efficiency, loss agreement and the N -> 1 resume check, on synthetic metrics.jsonl files."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from flamia_train.metrics import Throughput

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "device"))
import summarize_multi_gpu as summ  # noqa: E402

TOKENS = 16384


def write_run(run_dir: Path, seconds: dict[int, float], losses: dict[int, float]) -> None:
    """metrics.jsonl as the trainer writes it: the rolling tokens/s of metrics.Throughput after each step."""
    run_dir.mkdir(parents=True)
    tp = Throughput()
    with open(run_dir / "metrics.jsonl", "w") as f:
        for step in sorted(seconds):
            tp.update(TOKENS, seconds[step])
            row = {"step": step, "loss": losses[step], "tokens_per_s": tp.tokens_per_s(), "tokens_seen": step * TOKENS,
                   "peak_memory_gb": 40.0 + step / 100, "seq_len": 2048}
            f.write(json.dumps({k: v for k, v in row.items() if v is not None}) + "\n")


def test_step_seconds_are_rebuilt_exactly_across_window_evictions(tmp_path):
    secs = {s: 1.0 + 0.37 * math.sin(s) + (5.0 if s == 1 else 0.0) for s in range(1, 41)}  # 40 > window + warm-up
    write_run(tmp_path / "r", secs, {s: 10.0 - s / 10 for s in secs})
    got = summ.step_seconds(summ.load_rows(tmp_path / "r"))
    assert sorted(got) == list(range(summ.TP_WARMUP + 1, 41))
    for step, value in got.items():
        assert value == pytest.approx(secs[step], rel=1e-9), step


def test_scaling_agreement_and_resume_check(tmp_path, capsys):
    steps = range(1, 21)
    loss1 = {s: 10.0 - 0.2 * s for s in steps}
    loss2 = {s: v * (1 + 1e-3 * (s % 3)) for s, v in loss1.items()}  # worst at steps 2, 5, ...: rel 2e-3
    write_run(tmp_path / "one", {s: 2.0 for s in steps}, loss1)
    write_run(tmp_path / "two", {s: 1.25 for s in steps}, loss2)  # 1.6x faster on 2 GPUs: 80% efficiency
    write_run(tmp_path / "resume", {s: 2.0 for s in range(16, 21)}, {s: loss2[s] * (1 + 1e-4) for s in range(16, 21)})
    log = tmp_path / "resume.log"
    log.write_text("UserWarning: checkpoint X was written by 2 ranks, this run has 1: per-rank states (rng) are "
                   "re-seeded\nresumed from /tmp/mg/two/checkpoints/step_00000015 at step 15\n")
    result = summ.main(["--one", str(tmp_path / "one"), "--two", str(tmp_path / "two"), "--resume",
                        str(tmp_path / "resume"), "--resume-log", str(log), "--ckpt-step", "15",
                        "--json", str(tmp_path / "s.json")])
    out = capsys.readouterr().out
    assert result["one"]["tokens_per_s"] == pytest.approx(TOKENS / 2.0)
    assert result["scaling_efficiency"] == pytest.approx(0.8)
    assert result["loss_agreement"]["max_rel"] == pytest.approx(2e-3)
    check = result["resume_check"]
    assert check["ok"], check["why"]
    assert check["first_step"] == 16 and check["log_step"] == 15 and check["reseed_warning"]
    assert "| 2-GPU FSDP2 | 2 | 1–20 | 13,107 | 6,554 | 80.0% |" in out
    assert "| resume 2→1 | 1 | 16–20 |" in out and "ok: from step 15 checkpoint" in out
    assert json.loads((tmp_path / "s.json").read_text())["resume_check"]["ok"] is True


def test_resume_check_fails_on_a_fresh_start_or_a_missing_run(tmp_path):
    steps = range(1, 11)
    loss = {s: 10.0 - 0.5 * s for s in steps}
    write_run(tmp_path / "one", {s: 1.0 for s in steps}, loss)
    write_run(tmp_path / "two", {s: 0.5 for s in steps}, loss)
    write_run(tmp_path / "fresh", {s: 1.0 for s in range(1, 6)}, {s: loss[s] for s in range(1, 6)})
    one, two, fresh, missing = (summ.run_stats(summ.load_rows(tmp_path / n), 2)
                                for n in ("one", "two", "fresh", "nothing"))
    check = summ.resume_check(one, two, fresh, 5, "", 0.02)
    assert not check["ok"] and "first logged step 1, expected 6" in check["why"]
    assert not summ.resume_check(one, two, missing, 5, "", 0.02)["ok"]
    text = summ.report(one, two, missing, summ.resume_check(one, two, missing, 5, "", 0.02), 2, "t")
    assert "| resume 2→1 | 1 | missing |" in text


def test_agreement_criterion_without_a_resume_run(tmp_path, capsys):
    steps = range(1, 13)
    loss1 = {s: 10.0 - 0.3 * s for s in steps}
    write_run(tmp_path / "one", {s: 2.0 for s in steps}, loss1)
    write_run(tmp_path / "two", {s: 1.0 for s in steps}, {s: v * (1 + 5e-4 * (s == 7)) for s, v in loss1.items()})
    args = ["--one", str(tmp_path / "one"), "--two", str(tmp_path / "two"), "--json", str(tmp_path / "s.json")]
    result = summ.main([*args, "--agree-tol", "1e-3"])
    out = capsys.readouterr().out
    assert "**Loss agreement 1 vs 2 GPUs: PASS** (criterion: max over steps s of |L_2(s) − L_1(s)| / |L_1(s)| ≤ " \
           "1.0e-03): max rel 5.00e-04 at step 7" in out
    assert "resume" not in out and "resume_check" not in result
    assert result["loss_agreement"]["ok"] is True and result["loss_agreement"]["tol"] == 1e-3
    summ.main([*args, "--agree-tol", "1e-4"])
    assert "**Loss agreement 1 vs 2 GPUs: FAIL**" in capsys.readouterr().out
    assert json.loads((tmp_path / "s.json").read_text())["loss_agreement"]["ok"] is False
