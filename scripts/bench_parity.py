"""Loss parity of one precision preset against another (issue 6): one `flamia-train` run per call.

    # one preset per process, one GPU each; same seed, same data order, same held-out batches
    CUDA_VISIBLE_DEVICES=0 python scripts/bench_parity.py --preset bf16 --run-dir runs/parity/bf16 \
        --out results/parity/bf16.json --corpus .gpu/corpus32k --budget 400 &
    CUDA_VISIBLE_DEVICES=1 python scripts/bench_parity.py --preset flamia --run-dir runs/parity/flamia \
        --out results/parity/flamia.json --corpus .gpu/corpus32k --budget 400
    python scripts/plot_losses.py --kind parity results/parity/bf16.json results/parity/flamia.json \
        --out docs/figures --prefix parity_ --table results/parity/parity.md
    python scripts/bench_parity.py --preset tiny-smoke ... --model tiny --device cpu   # CPU smoke: see tests

Each call trains with the product's own loop, `python -m flamia_train.train` (no copy of it
here): --steps optimizer steps of --seq-len × --micro-batch tokens, the train loss of every
step and the held-out loss (the same --eval-batches every time) at step 0, every --eval-every
steps and at the end, all in run_dir/metrics.jsonl. The seed, the data order and the held-out
batches depend on none of the precision settings, so two presets differ only by the recipe.

Time-boxed and resumable: after --budget seconds the run gets SIGTERM, which makes the trainer
checkpoint the step it is on and exit; calling this again with the same --run-dir continues
from there (resume=auto) with the same data order. A run that is already complete is not
started again. Either way --out is rewritten from metrics.jsonl, in scripts/bench_recipes.py's
JSON layout ({"meta", "rows": [one row]}), so plot_losses.py merges the presets' files.
Never imported by the package.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import commit_label  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def overrides(args) -> list[str]:
    """The flamia-train command line of this run (Hydra overrides)."""
    return [
        f"model={args.model}", f"precision={args.preset}", "logger=none", "logger.log_interval=1",
        f"run_dir={args.run_dir}", "resume=auto", f"train.steps={args.steps}", f"train.seq_len={args.seq_len}",
        f"train.micro_batch_size={args.micro_batch}", f"train.lr={args.lr}",
        f"schedule.warmup_steps={max(1, args.steps // 10)}", f"train.eval_interval={args.eval_every}",
        f"train.eval_batches={args.eval_batches}", f"checkpoint.interval={args.checkpoint_every}", "checkpoint.keep=1",
        "checkpoint.export_safetensors=false", f"parallel.device={args.device}",
        *([f"data.path={args.corpus}", f"data.tokenizer={args.corpus}/tokenizer.model"] if args.corpus else []),
        *args.extra,
    ]


def read_metrics(run_dir: Path) -> dict[int, dict]:
    """step -> the last record of that step (a run killed past its checkpoint repeats steps on resume)."""
    path = run_dir / "metrics.jsonl"
    records: dict[int, dict] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                records[rec["step"]] = {**records.get(rec["step"], {}), **rec}
    return records


def row(preset: str, steps: int, records: dict[int, dict], warmup: int) -> dict:
    """The preset's row: every train loss from step 1 on, the held-out points, tokens/s."""
    losses = []
    while len(losses) + 1 in records and "loss" in records[len(losses) + 1]:
        losses.append(records[len(losses) + 1]["loss"])
    evals = [[s, r["eval/loss"]] for s, r in sorted(records.items()) if "eval/loss" in r and s <= len(losses)]
    speeds = [records[s]["tokens_per_s"] for s in range(warmup + 1, len(losses) + 1)
              if records[s].get("tokens_per_s")]
    last = records.get(len(losses), {})
    return {
        "preset": preset, "steps": steps, "steps_done": len(losses), "complete": len(losses) == steps,
        "losses": losses, "evals": evals,
        "final_loss": statistics.fmean(losses[-10:]) if losses else float("nan"),
        "heldout_loss": evals[-1][1] if evals else float("nan"), "heldout_step": evals[-1][0] if evals else None,
        "tokens_per_s": statistics.median(speeds) if speeds else float("nan"),
        "tokens_per_step": last.get("tokens_seen", 0) // max(1, len(losses)),
        "skipped_steps": last.get("guard/skipped_steps", 0),  # by the NaN/spike guard (docs/reliability.md)
    }


def train(args, command: list[str]) -> int:
    """Run flamia-train until it ends or --budget passes (then SIGTERM: checkpoint and exit)."""
    print("$ " + shlex.join(command), flush=True)
    proc = subprocess.Popen(command, cwd=ROOT)
    try:
        return proc.wait(timeout=args.budget or None)
    except subprocess.TimeoutExpired:
        print(f"bench_parity: budget of {args.budget:.0f} s reached: SIGTERM (the trainer checkpoints and exits)",
              flush=True)
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=args.grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


def device_name(device: str) -> str:
    if device == "cpu":
        return "cpu"
    query = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i",
                            os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]],
                           capture_output=True, text=True)
    return query.stdout.strip() or "unknown"


def meta(args, command: list[str], calls: int) -> dict:
    return {"command": "python " + shlex.join(["scripts/bench_parity.py", *sys.argv[1:]]),
            "train_command": shlex.join(command), "commit": commit_label(ROOT),
            "date": datetime.date.today().isoformat(), "device": device_name(args.device), "model": args.model,
            "steps": args.steps, "seq_len": args.seq_len, "micro_batch": args.micro_batch, "lr": args.lr,
            "eval_every": args.eval_every, "eval_batches": args.eval_batches, "calls": calls,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--preset", required=True, help="configs/precision/<name>")
    p.add_argument("--run-dir", type=Path, required=True, help="the run's directory; the same one resumes")
    p.add_argument("--out", type=Path, required=True, help="JSON file to write")
    p.add_argument("--model", default="gpt-125m", help="configs/model/<name>")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--micro-batch", type=int, default=4, help="rows per step (no gradient accumulation)")
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--eval-every", type=int, default=250, help="held-out loss every N steps (and at 0 and the end)")
    p.add_argument("--eval-batches", type=int, default=10,
                   help="held-out micro-batches (10 × 4 × 1024 ≈ the whole 44k-token held-out split of corpus32k)")
    p.add_argument("--checkpoint-every", type=int, default=500, help="periodic checkpoints (SIGTERM also saves)")
    p.add_argument("--budget", type=float, default=0.0, help="seconds of training in this call (0: no limit)")
    p.add_argument("--grace", type=float, default=90.0, help="seconds after SIGTERM before SIGKILL")
    p.add_argument("--warmup", type=int, default=10, help="steps left out of the median tokens/s")
    p.add_argument("--corpus", default="", help="prepared corpus dir; default: the config's embedded corpus")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("extra", nargs="*", help="more Hydra overrides, after --")
    args = p.parse_args(argv)
    if min(args.steps, args.eval_batches) < 1 or min(args.eval_every, args.budget, args.grace) < 0:
        p.error("--steps and --eval-batches >= 1; --eval-every, --budget, --grace >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.run_dir = args.run_dir.resolve()
    command = [sys.executable, "-m", "flamia_train.train", *overrides(args)]
    state_path = args.run_dir / "bench_parity_calls"
    calls = int(state_path.read_text()) if state_path.is_file() else 0
    done = row(args.preset, args.steps, read_metrics(args.run_dir), args.warmup)["steps_done"]
    code = 0
    if done >= args.steps:
        print(f"bench_parity: {args.run_dir} already has all {args.steps} steps: not training again", flush=True)
    else:
        if done:
            print(f"bench_parity: resuming {args.run_dir} after step {done}", flush=True)
        args.run_dir.mkdir(parents=True, exist_ok=True)
        calls += 1
        state_path.write_text(str(calls))
        t0 = time.monotonic()
        code = train(args, command)
        print(f"bench_parity: flamia-train exit {code} after {time.monotonic() - t0:.0f} s", flush=True)
    result = row(args.preset, args.steps, read_metrics(args.run_dir), args.warmup)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta(args, command, calls), "rows": [result]}) + "\n")
    held = f"{result['heldout_loss']:.4f} at step {result['heldout_step']}" if result["evals"] else "n/a"
    print(f"bench_parity: {args.preset} {result['steps_done']}/{args.steps} steps, final train loss "
          f"{result['final_loss']:.4f}, held-out {held}, {result['tokens_per_s']:,.0f} tokens/s -> {args.out}",
          flush=True)
    # a run stopped by the budget is not a failure: it resumes on the next call
    return code if code not in (0, -signal.SIGTERM, 128 + signal.SIGTERM) else 0


if __name__ == "__main__":
    sys.exit(main())
