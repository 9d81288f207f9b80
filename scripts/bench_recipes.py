"""Loss and speed of every precision recipe, trained one after another in ONE process (issue 4).

    python scripts/bench_recipes.py --steps 300 --out docs/figures/recipes     # gpt-125m, all presets, on the GPU
    python scripts/bench_recipes.py --presets bf16 fp8 flamia --steps 100 --out /tmp/recipes
    python scripts/bench_recipes.py --model tiny --steps 5 --presets bf16 fp8 --device cpu --out /tmp/r   # smoke
    python scripts/plot_losses.py runs/bench_recipes/recipes.json --out docs/figures --prefix recipes_  # PNGs

For each preset: compose the config with Hydra's compose API (the same tree and schema as
`flamia-train`, plus --extra overrides), validate it, build the run with `build.build_run`
(world size 1), and train --steps optimizer steps exactly as `Trainer` does (precision phase,
context point, `train_step`). Every preset starts from the same seed and reads the corpus in
the same order, so the curves differ only by the recipe. tokens/s is the median over the steps
after --warmup; the held-out loss (the same --eval-batches every time) is measured at the end
and, with --eval-every N, at step 0 and every N steps. (Long, resumable loss-parity runs:
scripts/bench_parity.py.)

--deadline S (or SIGTERM, e.g. from `timeout`) stops the preset in progress after its current
step, measures its held-out loss and writes everything with `complete: false`; later presets
are not started. The JSON is also rewritten at every held-out point, so even a killed run
leaves its curve so far.

Outputs under --out: <name>.json (every loss and step time of every preset, the held-out
points, tokens/s, the command, commit, date and device) and <name>.md (the table). PNGs come
from scripts/plot_losses.py (matplotlib; run here at the end when it is importable, else on
any machine from the JSON). Never imported by the package.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.util
import json
import os
import shlex
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import commit_label  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
PRESETS = ["bf16", "fp8", "fp8-block", "mxfp8", "nvfp4", "flamia"]
STOP: dict = {"why": None, "at": float("inf")}  # the stop request: SIGTERM or the --deadline (monotonic s)


def compose_preset(args, preset: str, run_dir: str):
    """(typed config, precision plan) of one preset; every error before any device work."""
    from hydra import compose, initialize_config_dir

    from flamia_train.config import register_configs, to_dataclass, validate

    register_configs()
    overrides = [
        f"model={args.model}", f"precision={preset}", "logger=none", f"run_dir={run_dir}", "resume=never",
        f"train.steps={args.steps}", f"train.seq_len={args.seq_len}", f"train.micro_batch_size={args.micro_batch}",
        f"train.lr={args.lr}", f"schedule.warmup_steps={max(1, args.steps // 10)}",
        f"train.eval_batches={args.eval_batches}", "checkpoint.interval=0", "checkpoint.export_safetensors=false",
        f"parallel.device={args.device}",
        *([f"data.path={args.corpus}", f"data.tokenizer={args.corpus}/tokenizer.model"] if args.corpus else []),
        *args.extra,
    ]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3", job_name="bench_recipes"):
        cfg = to_dataclass(compose(config_name="train", overrides=overrides))
    return cfg, validate(cfg, world_size=1)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _stop_requested() -> bool:
    if STOP["why"] is None and time.monotonic() >= STOP["at"]:
        STOP["why"] = "deadline"
    return STOP["why"] is not None


def summarize(preset: str, steps: int, losses: list, seconds: list, evals: list, tokens_per_step: int,
              warmup: int) -> dict:
    """One preset's row as it stands: every loss and step time, the held-out points, tokens/s."""
    timed = seconds[warmup:] or seconds
    return {
        "preset": preset, "steps": steps, "steps_done": len(losses), "complete": len(losses) == steps,
        "losses": losses, "step_seconds": [round(s, 5) for s in seconds], "evals": evals,
        "final_loss": statistics.fmean(losses[-10:]) if losses else float("nan"),
        "heldout_loss": evals[-1][1] if evals else float("nan"),
        "tokens_per_s": tokens_per_step / statistics.median(timed) if timed else float("nan"),
        "tokens_per_step": tokens_per_step,
    }


def train_preset(args, env, preset: str, save) -> dict:
    """Train one preset for --steps (or until a stop request); its row. `save(row)` records progress."""
    from flamia_train.build import build_run
    from flamia_train.trainer import Trainer

    with tempfile.TemporaryDirectory(prefix=f"bench_recipes_{preset}_") as run_dir:
        cfg, plan = compose_preset(args, preset, run_dir)
        run = build_run(cfg, env, plan)
        trainer = Trainer(run)
        losses, seconds, evals = [], [], []
        tokens_per_step, t_start = trainer.tokens_per_step, time.perf_counter()

        def row() -> dict:
            r = summarize(preset, args.steps, losses, seconds, evals, tokens_per_step, args.warmup)
            return {**r, "wall_s": round(time.perf_counter() - t_start, 2), "table": plan.policy_at(0).rows()}

        if args.eval_every:
            evals.append([0, trainer.evaluate()])
        for step in range(args.steps):
            _sync(env.device)
            t0 = time.perf_counter()
            trainer.enter_context(step)
            run.precision.begin_step(step)
            metrics = trainer.train_step(step)
            run.state.step = step + 1
            _sync(env.device)
            seconds.append(time.perf_counter() - t0)
            losses.append(metrics["loss"])
            done = step + 1 == args.steps or _stop_requested()
            if done or (args.eval_every and (step + 1) % args.eval_every == 0):
                evals.append([step + 1, trainer.evaluate()])
                save(row())
                print(f"  {preset} step {step + 1}/{args.steps} held-out loss {evals[-1][1]:.4f}", flush=True)
            if (step + 1) % max(1, args.steps // 10) == 0:
                print(f"  {preset} step {step + 1}/{args.steps} loss {metrics['loss']:.4f} "
                      f"({seconds[-1] * 1e3:.0f} ms/step)", flush=True)
            if done:
                break
        result = row()
        if not result["complete"]:
            result["stopped_by"] = STOP["why"]
            print(f"  {preset}: stopped by {STOP['why']} after {len(losses)} of {args.steps} steps", flush=True)
        run.close()
        del run, trainer
    gc.collect()
    if env.device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def markdown(rows: list[dict], meta: dict) -> str:
    base = next((r for r in rows if r["preset"] == "bf16"), None)  # tokens/s holds for a stopped run too
    lines = [f"`{meta['command']}` — commit {meta['commit']}, {meta['date']}, {meta['device']}", "",
             "| preset | steps | final train loss (mean of last 10) | held-out loss | tokens/s | × bf16 |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ratio = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}" if base else "n/a"
        steps = str(r["steps"]) if r["complete"] else f"{r['steps_done']} of {r['steps']} (stopped)"
        lines.append(f"| {r['preset']} | {steps} | {r['final_loss']:.4f} | {r['heldout_loss']:.4f} | "
                     f"{r['tokens_per_s']:,.0f} | {ratio} |")
    if meta.get("not_run"):
        lines += ["", f"Not run (stopped by {meta.get('stopped_by')}): {', '.join(meta['not_run'])}."]
    return "\n".join(lines) + "\n"


def _meta(args, device: torch.device) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"command": "python " + shlex.join(["scripts/bench_recipes.py", *sys.argv[1:]]),
            "commit": commit_label(ROOT), "date": datetime.date.today().isoformat(),
            "device": name, "model": args.model, "torch": torch.__version__,
            "steps": args.steps, "seq_len": args.seq_len, "micro_batch": args.micro_batch, "lr": args.lr,
            "eval_batches": args.eval_batches, "eval_every": args.eval_every,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


def _plot(json_path: Path, out: Path) -> None:
    """PNGs through scripts/plot_losses.py when matplotlib is importable here."""
    if importlib.util.find_spec("matplotlib") is None:
        print(f"matplotlib is not installed: no PNGs here; elsewhere run "
              f"python scripts/plot_losses.py {json_path} --out DIR", flush=True)
        return
    spec = importlib.util.spec_from_file_location("plot_losses", Path(__file__).with_name("plot_losses.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main([str(json_path), "--out", str(out)])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--steps", type=int, default=300, help="optimizer steps per preset")
    p.add_argument("--presets", nargs="+", default=PRESETS, help="configs/precision/<name> to run, in order")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_recipes", help="output directory")
    p.add_argument("--name", default="recipes", help="output file stem: <out>/<name>.json and .md")
    p.add_argument("--model", default="gpt-125m", help="configs/model/<name>")
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--micro-batch", type=int, default=16, help="rows per step (no gradient accumulation)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=10, help="steps left out of tokens/s (compile, autotune, caches)")
    p.add_argument("--eval-every", type=int, default=0,
                   help="held-out loss at step 0 and every N steps (0: only at the end)")
    p.add_argument("--eval-batches", type=int, default=8, help="held-out micro-batches per evaluation")
    p.add_argument("--deadline", type=float, default=0.0,
                   help="seconds from start after which the running preset stops and later ones are skipped (0: none)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNGs even when matplotlib is importable")
    p.add_argument("--corpus", default="", help="prepared corpus dir; default: the config's embedded corpus")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--extra", nargs="*", default=[], help="Hydra overrides for every preset")
    args = p.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.eval_every < 0 or args.eval_batches < 1 or args.deadline < 0:
        p.error("--steps >= 1, --eval-batches >= 1, and --warmup, --eval-every, --deadline >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    from flamia_train import parallel

    args = parse_args(argv)
    if args.deadline:
        STOP["at"] = time.monotonic() + args.deadline
    signal.signal(signal.SIGTERM, lambda *_: STOP.update(why="SIGTERM"))
    args.out.mkdir(parents=True, exist_ok=True)
    for preset in args.presets:  # every preset composes and validates before any device work
        compose_preset(args, preset, str(args.out / "check"))
    env = parallel.init_distributed(args.device)
    meta = _meta(args, env.device)
    json_path = args.out / f"{args.name}.json"
    rows: list[dict] = []

    def save(partial: dict | None = None) -> None:
        json_path.write_text(json.dumps({"meta": meta, "rows": rows + ([partial] if partial else [])}) + "\n")

    try:
        for i, preset in enumerate(args.presets):
            if _stop_requested():
                meta.update(not_run=args.presets[i:], stopped_by=STOP["why"])
                break
            rows.append(train_preset(args, env, preset, save))
            save()
    finally:
        parallel.shutdown()
    save()
    table = markdown(rows, meta)
    (args.out / f"{args.name}.md").write_text(table)
    print("\n" + table, flush=True)
    if rows and not args.no_plot:
        _plot(json_path, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
