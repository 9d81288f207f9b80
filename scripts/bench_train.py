"""End-to-end training speed of precision recipes × contexts in ONE process, so the ratios hold (issue 6).

    python scripts/bench_train.py                                  # default grid: gpt-1b, bf16/fp8/flamia, 2k/8k
    python scripts/bench_train.py --recipes bf16 fp8-linears flamia-attention fp8 flamia --contexts 8k --record
    python scripts/bench_train.py --recipes bf16 "bf16-compile:bf16 parallel.compile=true" --contexts 2k

For each (context, recipe): compose the config with Hydra's compose API (the same tree and
schema as `flamia-train`), validate it, build the run with `build.build_run` (world size 1),
train `--warmup` steps, time `--steps` more (tokens/s = median), profile `--profile-steps`
more with torch.profiler (kernel time per category, see bench_train_report.py), then free
everything and move on. A row that runs out of memory is recorded as OOM and the grid goes on.

Recipes: any configs/precision/<name>.yaml, plus
  fp8-linears       fp8 recipe with bf16 attention (SDPA/cuDNN)
  flamia-attention  bf16 linears with FLAMIA fp8 attention
  LABEL:BASE OVERRIDE...  BASE (a name above) plus Hydra overrides, e.g.
                    "fp8-ac:fp8 parallel.activation_checkpoint=selective"
Contexts: 2k, 8k, 32k or a token count; tokens per optimizer step stay `--tokens-per-step`
(micro-batch = --micro-tokens / seq_len, at least 1; gradient accumulation makes up the rest).

Data: `--data synthetic` (default) swaps the run's training loader for uniform random tokens
after build_run (no data-dependent work in a step, so the speed is the same; the loss is not
meaningful); `--data corpus` trains on `--corpus` (a prepared stdlib-format corpus, default
.gpu/corpus32k when present). build_run still opens the corpus either way: it has no loader hook.

Regression: docs/bench_train.json keeps the last recorded row per model/recipe/context; each
row prints its change against it, and `--record` writes this run's rows into it.
Outputs: `--out DIR` gets bench_train.json (every field) and bench_train.md (the table), rewritten
after every row so a run cut short keeps what it measured. Never imported by the package.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import re
import shlex
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_train_report as report  # noqa: E402
from launch_configs import launch_overrides, load_launch  # noqa: E402
from provenance import commit_label  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
ALIASES = {  # name -> (shipped recipe, overrides)
    "fp8-linears": ("fp8", ["precision.default.attention=bf16"]),
    "flamia-attention": ("bf16", ["precision.default.attention=fp8"]),
}
DEFAULT_CORPUS = ".gpu/corpus32k" if (ROOT / ".gpu/corpus32k/tokenizer.model").is_file() else "data/stdlib"


class SyntheticLoader:
    """Uniform random tokens behind PackedLoader's interface (next_batch / set_seq_len / state_dict).

    Deterministic per (seed, draw), so every recipe trains on the same tokens.
    """

    kind = "synthetic"

    def __init__(self, vocab_size: int, seq_len: int, micro_batch: int, seed: int = 0):
        self.vocab_size, self.seed, self.draws = vocab_size, seed, 0
        self.set_seq_len(seq_len, micro_batch)

    def set_seq_len(self, seq_len: int, micro_batch: int) -> None:
        self.seq_len, self.micro_batch = seq_len, micro_batch

    def next_batch(self, doc_ids: bool = False):
        """(inputs, targets) LongTensor[micro_batch, seq_len]; with doc_ids, one document per row."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.draws)
        self.draws += 1
        rows = torch.randint(self.vocab_size, (self.micro_batch, self.seq_len + 1), generator=gen)
        inputs, targets = rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
        return (inputs, targets, torch.zeros_like(inputs)) if doc_ids else (inputs, targets)

    def state_dict(self) -> dict:
        return {"kind": self.kind, "seed": self.seed, "draws": self.draws}

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.draws = int(state["seed"]), int(state["draws"])


# ---------------------------------------------------------------------- the grid

def parse_context(text: str) -> int:
    """'2k' -> 2048, '8192' -> 8192."""
    m = re.fullmatch(r"(\d+)([kK]?)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"context {text!r}: a token count like 2048 or 2k")
    return int(m.group(1)) * (1024 if m.group(2) else 1)


def context_label(seq_len: int) -> str:
    return f"{seq_len // 1024}k" if seq_len % 1024 == 0 else str(seq_len)


def recipe_overrides(spec: str) -> tuple[str, list[str]]:
    """(label, Hydra overrides) of a recipe argument: a name, an alias, or LABEL:BASE OVERRIDE..."""
    label, colon, rest = spec.partition(":")
    base, *extra = rest.split() if colon else [spec]
    if not re.fullmatch(r"[A-Za-z0-9_.+-]+", label or "-") or not base:
        raise SystemExit(f"bench_train: recipe {spec!r}: expected NAME or LABEL:BASE OVERRIDE...")
    base, alias_extra = ALIASES.get(base, (base, []))
    shipped = sorted(p.stem for p in (CONFIGS / "precision").glob("*.yaml"))
    if base not in shipped:
        raise SystemExit(f"bench_train: recipe {spec!r}: unknown base {base!r}; allowed: "
                         f"{', '.join(shipped + sorted(ALIASES))}")
    return label, [f"precision={base}", *alias_extra, *extra, f"precision.name={label}"]


def batch_shape(seq_len: int, tokens_per_step: int, micro_tokens: int) -> tuple[int, int]:
    """(micro_batch, accumulation) keeping `tokens_per_step` constant across contexts."""
    micro = max(1, micro_tokens // seq_len)
    if tokens_per_step % (micro * seq_len):
        raise SystemExit(f"bench_train: --tokens-per-step {tokens_per_step} is not a multiple of micro-batch "
                         f"{micro} x seq_len {seq_len}; pick powers of two")
    return micro, tokens_per_step // (micro * seq_len)


def compose_row(args, recipe: str, seq_len: int, run_dir: str):
    """(label, typed FlamiaConfig, precision plan, micro_batch, accum) of one grid cell; errors before GPU work."""
    from hydra import compose, initialize_config_dir

    from flamia_train.config import register_configs, to_dataclass, validate

    register_configs()  # idempotent: the schema train.yaml extends
    label, precision = recipe_overrides(recipe)
    micro, accum = batch_shape(seq_len, args.tokens_per_step, args.micro_tokens)
    total = args.warmup + args.steps + args.profile_steps
    overrides = [
        f"model={args.model}", "logger=none", f"run_dir={run_dir}", "resume=never",
        f"data.path={args.corpus}", f"data.tokenizer={args.corpus}/tokenizer.model",
        f"train.steps={total}", f"train.seq_len={seq_len}", f"train.micro_batch_size={micro}",
        f"train.tokens_per_step={args.tokens_per_step}", "train.eval_batches=0",
        # a tiny, still-rising LR all run: no recipe diverges (a skipped step would be faster)
        f"schedule.warmup_steps={total - 1}", "checkpoint.interval=0", "checkpoint.export_safetensors=false",
        *precision, *args.extra,
    ]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3", job_name="bench_train"):
        cfg = to_dataclass(compose(config_name="train", overrides=overrides))
    return label, cfg, validate(cfg, world_size=1), micro, accum


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed_step(trainer, run, step: int) -> float:
    """One optimizer step as Trainer._loop runs it (context point, precision phase, train_step); seconds."""
    _sync(run.env.device)
    t0 = time.perf_counter()
    trainer.enter_context(step)
    if run.precision is not None:
        run.precision.begin_step(step)
    trainer.train_step(step)
    run.state.step = step + 1
    _sync(run.env.device)
    return time.perf_counter() - t0


def _profile(trainer, run, first: int, steps: int) -> dict | None:
    """Kernel-time breakdown over `steps` steps starting at `first` (bench_train_report.breakdown)."""
    from torch.profiler import ProfilerActivity, profile

    on_cuda = run.env.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    try:
        with profile(activities=activities) as prof:
            wall = sum(_timed_step(trainer, run, first + i) for i in range(steps))
        times = report.kernel_times_us(prof, on_cuda)
    except RuntimeError as err:  # e.g. CUPTI unavailable: keep the row's speed, say why there is no split
        if _is_oom(err):
            raise
        return {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
    return report.breakdown(times, steps, 1e3 * wall / steps) if times else None


def measure(args, env, cfg, plan, micro: int) -> dict:
    """Build, warm up, time and profile one row; the Run is gone when this returns."""
    from flamia_train.build import build_run
    from flamia_train.metrics import mfu, peak_memory_bytes, reset_peak_memory
    from flamia_train.trainer import Trainer

    reset_peak_memory(env.device)
    t0 = time.perf_counter()
    run = build_run(cfg, env, plan)
    try:
        if args.data == "synthetic":
            run.train_loader = SyntheticLoader(cfg.model.vocab_size, cfg.train.seq_len, micro, seed=cfg.train.seed)
        trainer = Trainer(run)  # after the swap: its context controller re-shapes the loaders it is given
        build_s = time.perf_counter() - t0
        for step in range(args.warmup):
            _timed_step(trainer, run, step)
        seconds = [_timed_step(trainer, run, args.warmup + i) for i in range(args.steps)]
        peak_gb = peak_memory_bytes(env.device) / 1e9
        tps = statistics.median(trainer.tokens_per_step / s for s in seconds)
        util = (run.precision.end_step(run.state.step, tps) if run.precision is not None
                else {"mfu": mfu(run.flops_per_token, tps, run.peak_flops)})
        split = _profile(trainer, run, run.state.step, args.profile_steps) if args.profile_steps else None
        return {"status": "ok", "tokens_per_s": round(tps, 1), "step_ms": round(1e3 * statistics.median(seconds), 2),
                "mfu": util.get("mfu"), "mfu_weighted": util.get("mfu_weighted"), "peak_mem_gb": round(peak_gb, 2),
                "breakdown": split, "skipped_steps": run.guard.skipped, "build_s": round(build_s, 1)}
    finally:
        run.close(None)


def _is_oom(err: BaseException) -> bool:
    return isinstance(err, torch.cuda.OutOfMemoryError) or "out of memory" in str(err).lower()


def run_row(args, env, recipe: str, seq_len: int) -> dict:
    """One grid cell as a result row; OOM and other failures become the row's status, never an abort."""
    with tempfile.TemporaryDirectory(prefix="bench_train_") as run_dir:
        label, cfg, plan, micro, accum = compose_row(args, recipe, seq_len, run_dir)
        row = {"model": args.model, "recipe": label, "context": context_label(seq_len), "seq_len": seq_len,
               "micro_batch": micro, "accum": accum,
               "setup": {"tokens_per_step": args.tokens_per_step, "data": args.data, "extra": list(args.extra),
                         **({"attention_launch": args.attention_launch} if args.attention_launch else {})}}
        failure = None
        try:
            row.update(measure(args, env, cfg, plan, micro))
        except Exception as err:  # noqa: BLE001 - one broken recipe must not end the grid
            failure = "OOM" if _is_oom(err) else f"error: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
            if failure != "OOM":
                traceback.print_exc()
        # Outside the except block, so the traceback (and the tensors its frames hold) is gone.
        gc.collect()
        if env.device.type == "cuda":
            torch.cuda.empty_cache()
        if failure:
            row["status"] = failure
        return row


# ---------------------------------------------------------------------- entry point

def _meta(args, device: torch.device) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"model": args.model, "device": name, "torch": torch.__version__, "commit": commit_label(ROOT),
            "date": datetime.date.today().isoformat(), "command": shlex.join(["python", *sys.argv]),
            "tokens_per_step": args.tokens_per_step, "data": args.data, "warmup": args.warmup,
            "steps": args.steps, "profile_steps": args.profile_steps}


def _write(out: Path, rows: list[dict], meta: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_train.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (out / "bench_train.md").write_text(report.markdown(rows, meta))


def run_grid(args) -> list[dict]:
    """Every (context, recipe) row in one process; writes --out after each row; returns the rows."""
    from flamia_train import parallel

    for seq_len in args.contexts:  # every cell composes and validates before any device work
        for recipe in args.recipes:
            compose_row(args, recipe, seq_len, str(Path(tempfile.gettempdir()) / "bench_train_check"))
    env = parallel.init_distributed(args.device)
    meta = _meta(args, env.device)
    baseline = report.load_baseline(args.baseline)
    rows: list[dict] = []
    with launch_overrides(args.attention_launch):  # every FLAMIA attention call of the grid
        for seq_len in args.contexts:
            for recipe in args.recipes:
                t0 = time.perf_counter()
                rows.append(run_row(args, env, recipe, seq_len))
                report.add_bf16_ratios(rows)
                report.compare(rows, baseline)
                print(f"[{time.perf_counter() - t0:.0f}s] " + report.console_line(rows[-1]), flush=True)
                if args.out:
                    _write(args.out, rows, meta)
    print("\n" + report.markdown(rows, meta), flush=True)
    if args.record:
        args.baseline.parent.mkdir(parents=True, exist_ok=True)
        args.baseline.write_text(json.dumps(report.record(rows, baseline, meta), indent=1) + "\n")
        print(f"recorded {sum(r['status'] in ('ok', 'OOM') for r in rows)} rows in {args.baseline}", flush=True)
    parallel.shutdown()
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--model", default="gpt-1b", help="configs/model/<name>")
    p.add_argument("--recipes", nargs="+", default=["bf16", "fp8", "flamia"])
    p.add_argument("--contexts", nargs="+", type=parse_context, default=[2048, 8192])
    p.add_argument("--warmup", type=int, default=10, help="untimed steps per row (compile, autotune, caches)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per row; tokens/s is their median")
    p.add_argument("--profile-steps", type=int, default=2, help="profiled steps for the breakdown; 0 = none")
    p.add_argument("--tokens-per-step", type=int, default=32768, help="tokens per optimizer step, every context")
    p.add_argument("--micro-tokens", type=int, default=16384, help="tokens per micro-batch (at least one row)")
    p.add_argument("--data", choices=("synthetic", "corpus"), default="synthetic")
    p.add_argument("--corpus", default=DEFAULT_CORPUS, help="prepared corpus dir (with tokenizer.model)")
    p.add_argument("--extra", nargs="*", default=[], help="Hydra overrides for every row, e.g. parallel.compile=true")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--out", type=Path, default=None, help="dir for bench_train.json and bench_train.md")
    p.add_argument("--baseline", type=Path, default=ROOT / "docs" / "bench_train.json")
    p.add_argument("--record", action="store_true", help="write this run's rows into --baseline")
    p.add_argument("--attention-launch", type=load_launch, default=None,
                   help="launch file (scripts/pick_launch.py) for the FLAMIA attention kernels of every row; "
                        "kept in each row's setup")
    args = p.parse_args(argv)
    if args.warmup < 0 or args.steps < 1 or args.profile_steps < 0:
        p.error("--warmup >= 0, --steps >= 1, --profile-steps >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    rows = run_grid(parse_args(argv))
    return 0 if all(r["status"] in ("ok", "OOM") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
