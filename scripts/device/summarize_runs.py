"""Summarise metrics.jsonl files of training runs: median tokens/s and MFU after warm-up, final losses.

    python scripts/device/summarize_runs.py runs/a/metrics.jsonl runs/b/metrics.jsonl
"""
import json
import statistics
import sys


def summarize(path: str, warmup: int = 10) -> dict:
    rows = [json.loads(line) for line in open(path)]
    steps = [r for r in rows if "tokens_per_s" in r and r["step"] > warmup]
    evals = [r for r in rows if "eval/loss" in r]
    mfus = [r["mfu"] for r in steps if r.get("mfu") is not None]
    return {
        "run": path,
        "steps": max(r["step"] for r in rows),
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in steps) if steps else float("nan"),
        "mfu": statistics.median(mfus) if mfus else float("nan"),
        "peak_memory_gb": max((r.get("peak_memory_gb", 0) for r in steps), default=0.0),
        "final_train_loss": [r["loss"] for r in rows if "loss" in r][-1],
        "heldout_loss": evals[-1]["eval/loss"] if evals else float("nan"),
    }


if __name__ == "__main__":
    print("| run | steps | tokens/s (median) | MFU (bf16 peak) | peak mem GB | train loss | held-out loss |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for path in sys.argv[1:]:
        s = summarize(path)
        print(f"| {s['run']} | {s['steps']} | {s['tokens_per_s']:.0f} | {s['mfu']:.3f} | {s['peak_memory_gb']:.1f} "
              f"| {s['final_train_loss']:.3f} | {s['heldout_loss']:.3f} |")
