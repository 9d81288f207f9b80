"""Summarise the long-context memory runs of scripts/device/close_out.sh (issue 5): per run and stage,
seq_len, micro-batch × accumulation, tokens/s, measured peak memory and an estimate from the model shape.

    python scripts/device/summarize_longctx.py --model gpt-1b --gpu-gb 140.4 --json R/longctx.json \\
        --run fp8-full fp8 full W/lc_fp8-full R/lc_fp8-full.log --run fp8-none fp8 none W/lc_fp8-none ...

Each run is one `flamia-train` process (scripts/device/train_nockpt.py) under a context schedule. Per
stage (bench_context.per_stage over run_dir/metrics.jsonl): tokens/s is the trainer's window at the
stage's last step (its first 2 steps left out: the window restarts at every stage), peak memory the
largest `peak_memory_gb` of the stage (torch.cuda.max_memory_allocated, reset at every stage change).
The planned stages come from the log ("stage i: steps a-b seq_len L micro_batch m accum k ..."), so a
stage the run never reached is listed with the reason (out of memory, time box, exit code).

The estimate (GiB) adds, for one micro-batch of T = micro_batch × seq_len tokens:
  * model state: 16 bytes per parameter (fp32 weights, fp32 gradients, AdamW m and v);
  * activations saved for the backward, per token and layer (d = d_model, f = ffn width, measured on the
    CPU with saved_tensors_hooks for the bf16 stack, 43.8·d for gpt-1b): two RMSNorms 8·d each (fp32
    input copy 4·d, normalised 2·d, scaled output 2·d), attention (bf16 SDPA: Q, K, V, O in bf16 + fp32
    LSE; FLAMIA fp8: ATTN_FP8_RATIO of that, the measured saved_bytes ratio at D = 128, plus the 2·d
    copy of O that the output projection saves), SwiGLU 8·f; `full` checkpointing keeps only each
    block's input (2·d) plus one block's activations being recomputed;
  * the loss: 12 bytes per token and vocabulary entry (bf16 logits, their fp32 copy, log-softmax
    output, its gradient), plus the final norm (8·d per token).
`selective` is not estimated (which tensors it keeps depends on which GEMMs are aten matmuls).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30
ATTN_FP8_RATIO = 0.518  # FLAMIA fp8 saved bytes / bf16 flash attention's (docs/benchmarks.md, D = 128)
LOSS_BYTES_PER_LOGIT = 12
STAGE_RE = re.compile(r"stage (\d+): steps (\d+)-(\d+) seq_len (\d+)(?:->(\d+))? micro_batch (\d+) accum (\d+)")
OOM_RE = re.compile(r"OutOfMemoryError|CUDA out of memory|out of memory", re.IGNORECASE)
EXIT_RE = re.compile(r"close_out: exit (\d+) after (\d+) s")


def _bench_context():
    spec = importlib.util.spec_from_file_location("bench_context", ROOT / "scripts" / "bench_context.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def model_shape(name: str) -> dict:
    """d_model, n_layers, heads, ffn width, vocab and parameter count of a configs/model/ preset."""
    import torch

    from flamia_train.model import GPT, MODEL_SHAPES

    cfg = MODEL_SHAPES[name]
    with torch.device("meta"):
        params = GPT(cfg).num_params()
    return {"d": cfg.d_model, "layers": cfg.n_layers, "heads": cfg.n_heads, "kv_heads": cfg.n_kv_heads,
            "head_dim": cfg.head_dim, "ffn": cfg.ffn_dim, "vocab": cfg.vocab_size, "params": params}


def layer_bytes_per_token(shape: dict, precision: str) -> float:
    """Bytes one block saves for its backward per token, without checkpointing (module doc)."""
    d, f, h, hkv, hd = shape["d"], shape["ffn"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    norms = 2 * 8 * d
    attn = 2 * (h * hd + 2 * hkv * hd) + 2 * h * hd + 4 * h  # SDPA: Q, K, V, O bf16 + LSE fp32
    if precision != "bf16":  # FLAMIA kernels: their saved operands, and O copied for the output projection
        attn = ATTN_FP8_RATIO * attn + 2 * h * hd
    return norms + attn + 8 * f


def estimate_gib(shape: dict, precision: str, ac: str, micro_batch: int, seq_len: int) -> dict | None:
    """The estimated peak (GiB) of one stage and its parts; None for a mode not modelled."""
    if ac not in ("none", "full"):
        return None
    tokens = micro_batch * seq_len
    per_layer = layer_bytes_per_token(shape, precision)
    if ac == "none":
        acts = shape["layers"] * per_layer * tokens
    else:
        acts = shape["layers"] * 2 * shape["d"] * tokens + per_layer * tokens
    parts = {"state": 16 * shape["params"] / GIB, "activations": acts / GIB,
             "loss": (LOSS_BYTES_PER_LOGIT * shape["vocab"] + 8 * shape["d"]) * tokens / GIB}
    parts["total"] = sum(parts.values())
    return parts


def planned_stages(log: str) -> list[dict]:
    """The resolved schedule the trainer printed at start-up."""
    out = []
    for m in STAGE_RE.finditer(log):
        out.append({"stage": int(m.group(1)), "first": int(m.group(2)) + 1, "last": int(m.group(3)) + 1,
                    "seq_len": int(m.group(5) or m.group(4)), "micro_batch": int(m.group(6)),
                    "accum": int(m.group(7))})
    return out


def run_summary(label: str, precision: str, ac: str, run_dir: Path, log_path: Path, shape: dict | None) -> dict:
    log = log_path.read_text(errors="replace") if log_path.is_file() else ""
    records = []
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        for line in metrics.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:  # a line cut by a killed run
                continue
    measured = {s["stage"]: s for s in _bench_context().per_stage(records)}
    exit_m = EXIT_RE.search(log)
    code = int(exit_m.group(1)) if exit_m else None
    why = ("out of memory" if OOM_RE.search(log) else
           "time box" if code in (124, 137) else f"exit {code}" if code else "not reached")
    last_step = max((r["step"] for r in records if "loss" in r), default=0)
    rows = []
    plan = planned_stages(log) or [{"stage": i, "first": s["steps"][0], "last": s["steps"][1],
                                    "seq_len": s["seq_len"][-1], "micro_batch": None, "accum": None}
                                   for i, s in measured.items()]
    for st in plan:
        got = measured.get(st["stage"])
        est = (estimate_gib(shape, precision, ac, st["micro_batch"], st["seq_len"])
               if shape and st["micro_batch"] else None)
        row = {**st, "estimate_gib": est}
        if got is not None:
            complete = got["steps"][1] >= st["last"]
            row.update(steps_done=got["steps"], tokens_per_s=got["tokens_per_s"], peak_gib=got["peak_memory_gb"],
                       loss_last=got["loss_last"],
                       status="ok" if complete else f"stopped at step {got['steps'][1]} ({why})")
        else:
            row["status"] = f"not reached ({why}; last logged step {last_step})"
        rows.append(row)
    error = next((ln.strip() for ln in reversed(log.splitlines()) if OOM_RE.search(ln) or "Error" in ln), None)
    return {"label": label, "precision": precision, "ac": ac, "exit": code, "stages": rows,
            "error": error, "wall_s": int(exit_m.group(2)) if exit_m else None}


def _f(x, spec: str) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def report(runs: list[dict], model: str, gpu_gib: float | None, title: str) -> str:
    lines = [f"## {title}", "",
             "| run | precision | activation checkpoint | stage | steps | seq_len | micro-batch × accum | tokens/s "
             "| peak memory GiB (measured) | estimate GiB (state + activations + loss) | status |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for run in runs:
        for st in run["stages"]:
            est = st.get("estimate_gib")
            est_text = (f"{est['total']:.1f} ({est['state']:.1f} + {est['activations']:.1f} + {est['loss']:.1f})"
                        if est else "—")
            shape = f"{st['micro_batch']} × {st['accum']}" if st.get("micro_batch") else "—"
            steps = (f"{st['steps_done'][0]}–{st['steps_done'][1]}" if st.get("steps_done")
                     else f"({st['first']}–{st['last']})")
            lines.append(f"| {run['label']} | {run['precision']} | {run['ac']} | {st['stage']} | {steps} "
                         f"| {st['seq_len']} | {shape} | {_f(st.get('tokens_per_s'), ',.0f')} "
                         f"| {_f(st.get('peak_gib'), '.1f')} | {est_text} | {st['status']} |")
    lines.append("")
    for run in runs:
        extra = f", wall {run['wall_s']} s" if run.get("wall_s") is not None else ""
        lines.append(f"- {run['label']}: exit {run['exit'] if run['exit'] is not None else '?'}{extra}"
                     + (f"; last error line: `{run['error'][:300]}`" if run["exit"] and run.get("error") else ""))
    fits = [r for r in runs if r["stages"] and r["stages"][-1]["status"] == "ok"]
    longest = max((r["stages"][-1]["seq_len"] for r in runs if r["stages"]), default=0)
    if gpu_gib:
        lines.append(f"- device memory {gpu_gib:.1f} GiB; {model}: runs that completed their last stage "
                     f"(up to {longest} tokens): {', '.join(r['label'] for r in fits) or 'none'}")
    lines += ["- tokens/s: the trainer's window at the stage's last step (first 2 steps of each stage left out); "
              "peak memory: torch.cuda.max_memory_allocated, reset at every stage change (stage 0 includes start-up)",
              "- estimate: scripts/device/summarize_longctx.py (module doc); `selective` not modelled"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", nargs=5, action="append", default=[], metavar=("LABEL", "PRECISION", "AC", "DIR", "LOG"),
                    help="one run: label, precision preset, parallel.activation_checkpoint, run_dir, console log")
    ap.add_argument("--model", default="gpt-1b", help="configs/model/ preset, for the estimate")
    ap.add_argument("--gpu-gb", type=float, default=None, help="device memory in GiB, for the verdict line")
    ap.add_argument("--title", default="Long context: peak memory per schedule stage")
    ap.add_argument("--json", type=Path, help="also write every number here")
    args = ap.parse_args(argv)
    try:
        shape = model_shape(args.model)
    except Exception as err:  # pragma: no cover - an unknown preset: measured figures only
        print(f"(no estimate: {err})")
        shape = None
    runs = [run_summary(label, prec, ac, Path(d), Path(log), shape) for label, prec, ac, d, log in args.run]
    print(report(runs, args.model, args.gpu_gb, args.title), end="")
    result = {"model": args.model, "shape": shape, "runs": runs}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main()
