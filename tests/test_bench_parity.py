"""scripts/bench_parity.py (issue 6) on the CPU: one tiny run, its JSON, a second call that does not
retrain, and plot_losses.py's parity table from the JSON (table only: no matplotlib needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import test_train_e2e as e2e

corpus = e2e.corpus  # the session fixture: a small prepared slice of the embedded corpus


def _script(*argv: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *argv], cwd=e2e.ROOT, capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def test_bench_parity_records_losses_and_heldout_points_and_does_not_retrain(tmp_path, corpus):
    out = tmp_path / "bf16.json"
    args = ["scripts/bench_parity.py", "--preset", "bf16", "--model", "tiny", "--device", "cpu", "--steps", "4",
            "--seq-len", "128", "--micro-batch", "2", "--eval-every", "2", "--eval-batches", "2", "--warmup", "1",
            "--corpus", str(corpus), "--run-dir", str(tmp_path / "run"), "--out", str(out)]
    _script(*args)
    row = json.loads(out.read_text())["rows"][0]
    assert row["complete"] and len(row["losses"]) == 4 and [s for s, _ in row["evals"]] == [0, 2, 4]
    assert row["heldout_loss"] == row["evals"][-1][1] and row["tokens_per_step"] == 256
    again = _script(*args)
    assert "not training again" in again.stdout
    assert json.loads(out.read_text())["rows"][0]["losses"] == row["losses"]
    table = _script("scripts/plot_losses.py", "--kind", "parity", str(out)).stdout
    assert "| bf16 | 4 |" in table and "+0.00% (step 4)" in table
