"""torchtitan training our gpt-1b shape on this GPU, beside scripts/bench_train.py (issue 6, item 2).

    python scripts/bench_torchtitan.py --contexts 8k --variants eager compile --out /tmp/results/torchtitan

Each variant is one `torchrun --nproc_per_node=1 -m torchtitan.train` process with the train spec
registered by scripts/torchtitan_gpt1b.py (torchtitan's Llama 3 at gpt-1b's shape, synthetic
tokens): bf16 FSDP2 mixed precision (fp32 master weights and reduction), no activation
checkpointing, AdamW, `--tokens-per-step` tokens per optimizer step made of micro-batches of
`--micro-tokens` (as bench_train.py), `eager` or `compile` (torchtitan's per-block torch.compile
of model and loss). tokens/s = the median of torchtitan's own per-step `tps` log after
`--warmup` steps; memory = its reserved-memory log at the last step. torchtitan 0.2.2 and its
missing dependencies travel as wheels (scripts/device/session4_torchtitan.sh). Never imported by
the package.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_train import batch_shape, parse_context  # scripts/ is this script's first sys.path entry

SCRIPTS = Path(__file__).resolve().parent
STEP_LINE = re.compile(r"step:\s*(\d+).*?loss:\s*([\d.]+).*?memory:\s*([\d.]+)GiB.*?tps:\s*([\d,]+)")
VARIANTS = {"eager": [], "compile": ["--compile.enable"]}


def command(seq_len: int, variant: str, args, dump: str) -> list[str]:
    micro, _ = batch_shape(seq_len, args.tokens_per_step, args.micro_tokens)  # bench_train's batching
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=1", "-m", "torchtitan.train",
            "--experimental.custom_import", "torchtitan_gpt1b", "--model.name", "flamia_gpt1b",
            "--model.flavor", "gpt1b", "--training.seq_len", str(seq_len),
            "--training.local_batch_size", str(micro),
            "--training.global_batch_size", str(args.tokens_per_step // seq_len),
            "--training.steps", str(args.warmup + args.steps), "--lr_scheduler.warmup_steps", "2",
            "--metrics.log_freq", "1", "--metrics.disable_color_printing",
            "--activation_checkpoint.mode", "none", "--job.dump_folder", dump, *VARIANTS[variant]]


def parse_steps(log: str) -> list[dict]:
    """torchtitan's per-step metric lines: step, loss, reserved GiB, tokens/s."""
    return [{"step": int(s), "loss": float(loss), "memory_gib": float(mem), "tps": float(tps.replace(",", ""))}
            for s, loss, mem, tps in STEP_LINE.findall(log)]


def run_variant(seq_len: int, variant: str, args) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SCRIPTS), os.environ.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory() as dump:
        cmd = command(seq_len, variant, args, dump)
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
            log, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as err:
            log, rc = (err.stdout or b"").decode() + (err.stderr or b"").decode(), "timeout"
    if args.out:
        (args.out / f"torchtitan_{variant}_{seq_len}.log").write_text(log)
    steps = parse_steps(log)
    timed = [s["tps"] for s in steps if s["step"] > args.warmup]
    row = {"variant": variant, "seq_len": seq_len, "exit": rc, "steps_logged": len(steps),
           "command": " ".join(cmd[2:]).replace(dump, "<tmp>")}
    if timed:
        row.update(tokens_per_s=statistics.median(timed), memory_gib=steps[-1]["memory_gib"],
                   loss_last=steps[-1]["loss"])
    else:
        row["error"] = "\n".join(log.strip().splitlines()[-15:])
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--contexts", nargs="+", type=parse_context, default=[8192])
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=["eager", "compile"])
    p.add_argument("--tokens-per-step", type=int, default=16384)
    p.add_argument("--micro-tokens", type=int, default=8192)
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the median (compile, caches)")
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--timeout", type=int, default=240, help="seconds per variant")
    p.add_argument("--out", type=Path, default=None, help="dir for torchtitan.json and the raw logs")
    args = p.parse_args()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seq_len in args.contexts:
        for variant in args.variants:
            row = run_variant(seq_len, variant, args)
            rows.append(row)
            shown = (f"{row['tokens_per_s']:,.0f} tokens/s, {row['memory_gib']:.1f} GiB reserved"
                     if "tokens_per_s" in row else f"no timed steps (exit {row['exit']}):\n{row['error']}")
            print(f"torchtitan gpt1b {variant:8s} seq {seq_len}: {shown}", flush=True)
            if args.out:
                (args.out / "torchtitan.json").write_text(json.dumps(rows, indent=1))
    return 0 if all("tokens_per_s" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
