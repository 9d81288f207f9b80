"""Loss and speed of every precision recipe, trained one after another in ONE process (issue 4).

    python scripts/bench_recipes.py --steps 300 --out docs/figures/recipes     # gpt-125m, all presets, on the GPU
    python scripts/bench_recipes.py --presets bf16 fp8 flamia --steps 100 --out /tmp/recipes
    python scripts/bench_recipes.py --model tiny --steps 5 --presets bf16 fp8 --device cpu --out /tmp/r   # smoke

For each preset: compose the config with Hydra's compose API (the same tree and schema as
`flamia-train`, plus --extra overrides), validate it, build the run with `build.build_run`
(world size 1), and train --steps optimizer steps exactly as `Trainer` does (precision phase,
context point, `train_step`). Every preset starts from the same seed and reads the embedded
corpus in the same order, so the curves differ only by the recipe. tokens/s is the median
over the steps after --warmup; the held-out loss is measured at the end.

Outputs under --out: recipes.json (every loss of every preset, tokens/s, held-out loss,
the command, commit, date and device), recipes.md (the table), and loss_<preset>.png per
preset plus loss_all.png (matplotlib, imported only here). Never imported by the package.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
PRESETS = ["bf16", "fp8", "fp8-block", "mxfp8", "nvfp4", "flamia"]


def compose_preset(args, preset: str, run_dir: str):
    """(typed config, precision plan) of one preset; every error before any device work."""
    from hydra import compose, initialize_config_dir

    from flamia_train.config import register_configs, to_dataclass, validate

    register_configs()
    overrides = [
        f"model={args.model}", f"precision={preset}", "logger=none", f"run_dir={run_dir}", "resume=never",
        f"train.steps={args.steps}", f"train.seq_len={args.seq_len}", f"train.micro_batch_size={args.micro_batch}",
        f"train.lr={args.lr}", f"schedule.warmup_steps={max(1, args.steps // 10)}", "train.eval_batches=8",
        "checkpoint.interval=0", "checkpoint.export_safetensors=false", f"parallel.device={args.device}",
        *([f"data.path={args.corpus}", f"data.tokenizer={args.corpus}/tokenizer.model"] if args.corpus else []),
        *args.extra,
    ]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3", job_name="bench_recipes"):
        cfg = to_dataclass(compose(config_name="train", overrides=overrides))
    return cfg, validate(cfg, world_size=1)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_preset(args, env, preset: str) -> dict:
    """Train one preset for --steps; its losses, median tokens/s and final held-out loss."""
    from flamia_train.build import build_run
    from flamia_train.trainer import Trainer

    with tempfile.TemporaryDirectory(prefix=f"bench_recipes_{preset}_") as run_dir:
        cfg, plan = compose_preset(args, preset, run_dir)
        run = build_run(cfg, env, plan)
        trainer = Trainer(run)
        losses, seconds = [], []
        for step in range(args.steps):
            _sync(env.device)
            t0 = time.perf_counter()
            if hasattr(trainer, "enter_context"):  # context schedules (seq-len warm-up), where present
                trainer.enter_context(step)
            run.precision.begin_step(step)
            metrics = trainer.train_step(step)
            run.state.step = step + 1
            _sync(env.device)
            seconds.append(time.perf_counter() - t0)
            losses.append(metrics["loss"])
            if (step + 1) % max(1, args.steps // 10) == 0:
                print(f"  {preset} step {step + 1}/{args.steps} loss {metrics['loss']:.4f}", flush=True)
        heldout = trainer.evaluate()
        tokens_per_step = trainer.tokens_per_step
        timed = seconds[args.warmup:] or seconds
        row = {
            "preset": preset, "steps": args.steps, "losses": losses,
            "final_loss": statistics.fmean(losses[-10:]), "heldout_loss": heldout,
            "tokens_per_s": tokens_per_step / statistics.median(timed), "tokens_per_step": tokens_per_step,
            "table": plan.policy_at(0).rows(),
        }
        run.close()
        del run, trainer
    gc.collect()
    if env.device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def markdown(rows: list[dict], meta: dict) -> str:
    base = next((r for r in rows if r["preset"] == "bf16"), None)
    lines = [f"`{meta['command']}` — commit {meta['commit']}, {meta['date']}, {meta['device']}", "",
             "| preset | final train loss (mean of last 10) | held-out loss | tokens/s | × bf16 |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        ratio = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}" if base else "n/a"
        lines.append(f"| {r['preset']} | {r['final_loss']:.4f} | {r['heldout_loss']:.4f} | "
                     f"{r['tokens_per_s']:,.0f} | {ratio} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], out: Path, meta: dict) -> None:
    """One loss-curve PNG per preset (bf16 drawn faintly for reference) and one with all of them."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no PNGs (recipes.json has every loss)", flush=True)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = next((r for r in rows if r["preset"] == "bf16"), None)
    caption = f"{meta['model']} · commit {meta['commit']} · {meta['date']}"
    for r in rows:
        fig, ax = plt.subplots(figsize=(6, 4))
        if base is not None and r is not base:
            ax.plot(base["losses"], color="0.7", lw=1, label="bf16")
        ax.plot(r["losses"], lw=1.2, label=r["preset"])
        ax.set(xlabel="step", ylabel="train loss", title=f"{r['preset']}: {caption}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / f"loss_{r['preset']}.png", dpi=120)
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        ax.plot(r["losses"], lw=1, label=r["preset"])
    ax.set(xlabel="step", ylabel="train loss", title=f"all presets: {caption}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "loss_all.png", dpi=120)
    plt.close(fig)


def _meta(args, device: torch.device) -> dict:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"command": "python " + shlex.join(["scripts/bench_recipes.py", *sys.argv[1:]]),
            "commit": commit.stdout.strip() or "unknown", "date": datetime.date.today().isoformat(),
            "device": name, "model": args.model, "torch": torch.__version__}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--steps", type=int, default=300, help="optimizer steps per preset")
    p.add_argument("--presets", nargs="+", default=PRESETS, help="configs/precision/<name> to run, in order")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_recipes", help="output directory")
    p.add_argument("--model", default="gpt-125m", help="configs/model/<name>")
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--micro-batch", type=int, default=16, help="rows per step (no gradient accumulation)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=10, help="steps left out of tokens/s (compile, autotune, caches)")
    p.add_argument("--corpus", default="", help="prepared corpus dir; default: the config's embedded corpus")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--extra", nargs="*", default=[], help="Hydra overrides for every preset")
    args = p.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps >= 1 and --warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    from flamia_train import parallel

    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for preset in args.presets:  # every preset composes and validates before any device work
        compose_preset(args, preset, str(args.out / "check"))
    env = parallel.init_distributed(args.device)
    meta = _meta(args, env.device)
    rows = []
    try:
        for preset in args.presets:
            rows.append(train_preset(args, env, preset))
            (args.out / "recipes.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    finally:
        parallel.shutdown()
    table = markdown(rows, meta)
    (args.out / "recipes.md").write_text(table)
    print("\n" + table, flush=True)
    plot(rows, args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
