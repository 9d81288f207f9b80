#!/usr/bin/env python
"""Run a model under a context schedule for N steps and report, per stage: loss, tokens/s, peak memory.

    python scripts/bench_context.py --model gpt-125m --schedule long-context --steps 40 --out bench.json \\
        -- precision=fp8 train.seq_len=2048 train.tokens_per_step=65536 \\
           'schedule.context.stages.1.seq_len=16384' parallel.activation_checkpoint=full

Everything after `--` is passed to `flamia-train` as Hydra overrides. The run goes through
the real CLI (a subprocess, or torchrun with --nproc > 1) into --run-dir, without
checkpoints or logging, and the per-step records of run_dir/metrics.jsonl are grouped by
`stage`. tokens/s is the trainer's window at the stage's last step (the trainer restarts
the window, after 2 warm-up steps, at every stage change); peak memory is the largest
`peak_memory_gb` of the stage (the CUDA peak is reset at each stage change; on a CPU it
is the process's max RSS, which only grows).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def per_stage(records: list[dict]) -> list[dict]:
    """Group metrics.jsonl training records by `stage`: steps, seq_len(s), loss, tokens/s, peak memory."""
    stages: dict[int, list[dict]] = {}
    for r in records:
        if "loss" in r and "stage" in r:
            stages.setdefault(int(r["stage"]), []).append(r)
    out = []
    for stage, rows in sorted(stages.items()):
        losses = [r["loss"] for r in rows]
        rates = [r["tokens_per_s"] for r in rows if r.get("tokens_per_s")]
        out.append({
            "stage": stage,
            "steps": [rows[0]["step"], rows[-1]["step"]],
            "seq_len": sorted({int(r["seq_len"]) for r in rows}),
            "loss_mean": sum(losses) / len(losses),
            "loss_last": losses[-1],
            "tokens_per_s": rates[-1] if rates else None,
            "peak_memory_gb": max(r.get("peak_memory_gb", 0.0) for r in rows),
        })
    return out


def run(args, overrides: list[str]) -> Path:
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="bench_context_"))
    flags = [f"model={args.model}", f"schedule={args.schedule}", f"train.steps={args.steps}", f"run_dir={run_dir}",
             "resume=never", "logger=none", "logger.log_interval=1", "checkpoint.interval=0",
             "checkpoint.export_safetensors=false", "train.eval_interval=0", "train.eval_batches=0",
             "schedule.warmup_steps=1"]
    if args.nproc > 1:
        cmd = [str(Path(sys.executable).with_name("torchrun")), "--standalone", f"--nproc_per_node={args.nproc}"]
    else:
        cmd = [sys.executable]
    proc = subprocess.run(cmd + ["-m", "flamia_train.train", *flags, *overrides], cwd=ROOT, env=os.environ.copy())
    if proc.returncode:
        raise SystemExit(f"bench_context: the training run failed (exit {proc.returncode})")
    return run_dir


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, overrides = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny", help="configs/model/ name")
    p.add_argument("--schedule", default="seq-warmup", help="configs/schedule/ name")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps")
    p.add_argument("--nproc", type=int, default=1, help="processes (torchrun) for data-parallel runs")
    p.add_argument("--run-dir", default="", help="where the run writes (default: a new temporary directory)")
    p.add_argument("--out", default="", help="write the per-stage results as JSON here")
    args = p.parse_args(ours)
    run_dir = run(args, overrides)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    stages = per_stage(records)
    header = ("stage", "steps", "seq_len", "loss_mean", "loss_last", "tokens/s", "peak GB")
    print(" ".join(f"{h:>{w}}" for h, w in zip(header, (5, 11, 15, 9, 9, 10, 8), strict=True)))
    for s in stages:
        rate = f"{s['tokens_per_s']:.0f}" if s["tokens_per_s"] else "n/a"
        lengths = "->".join(str(n) for n in (s["seq_len"][0], s["seq_len"][-1])) if len(s["seq_len"]) > 1 \
            else str(s["seq_len"][0])
        print(f"{s['stage']:>5} {s['steps'][0]:>5}-{s['steps'][1]:<5} {lengths:>15} {s['loss_mean']:>9.4f} "
              f"{s['loss_last']:>9.4f} {rate:>10} {s['peak_memory_gb']:>8.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps({"model": args.model, "schedule": args.schedule, "steps": args.steps,
                                              "overrides": overrides, "stages": stages}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
