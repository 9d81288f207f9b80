"""Summarise scripts/device/multi_gpu.sh (issue 8): 1-GPU vs N-GPU FSDP2 scaling and the N -> 1 GPU resume.

    python scripts/device/summarize_multi_gpu.py --one W/one --two W/two --resume W/resume \
        --resume-log R/resume.log --ckpt-step 15 --nproc 2 --json R/summary.json

Reads each run directory's metrics.jsonl (rank 0's record, one row per step with
logger.log_interval=1) and prints a markdown table: tokens/s (median of per-step values
after --warmup steps), tokens/s per GPU, scaling efficiency = N-GPU tokens/s / (N x 1-GPU
tokens/s), peak memory, the per-step loss agreement of the two runs and the resume check,
then the per-step losses side by side. Without --resume the resume row and check are left out.

Loss agreement criterion (--agree-tol): max over the steps both runs logged of
|L_N(s) - L_1(s)| / |L_1(s)| <= tol, printed as a PASS/FAIL line and stored in the JSON.

Per-step tokens/s: the trainer logs `tokens_per_s` as a rolling mean (metrics.Throughput: the
last `window` steps, the process's first `warmup` steps never counted). With every step logged
and a constant number of tokens per step, the rolling sums give back each step's duration
exactly; where they cannot (a gap in the log), the run falls back to the logged rolling mean.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from pathlib import Path

try:  # the trainer's own constants, so the reconstruction follows the code
    import inspect

    from flamia_train.metrics import Throughput

    _PARAMS = inspect.signature(Throughput).parameters
    WINDOW, TP_WARMUP = _PARAMS["window"].default, _PARAMS["warmup_steps"].default
except Exception:  # pragma: no cover - run without the package on the path
    WINDOW, TP_WARMUP = 20, 2


def load_rows(run_dir: Path | None) -> list[dict]:
    """Step rows (those with a training loss) of run_dir/metrics.jsonl; [] when it is missing."""
    if run_dir is None:
        return []
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:  # a line cut by a killed run
            continue
        if "loss" in row:
            rows.append(row)
    return rows


def step_seconds(rows: list[dict]) -> dict[int, float]:
    """step -> seconds of that optimizer step, rebuilt from the rolling tokens/s (see module doc).

    Needs consecutive steps from the process's first step and constant tokens per step; returns {}
    when the rows do not allow it.
    """
    if len(rows) < 2:
        return {}
    steps = [r["step"] for r in rows]
    if steps != list(range(steps[0], steps[0] + len(steps))):
        return {}
    per_step = (rows[-1]["tokens_seen"] - rows[0]["tokens_seen"]) / max(1, len(rows) - 1)
    counted: list[float] = []  # seconds of every step the Throughput window has taken in, in order
    prev_sum = 0.0
    out = {}
    for i, row in enumerate(rows, start=1):  # i: the step's index within this process
        if i <= TP_WARMUP:
            continue
        tps = row.get("tokens_per_s")
        if not tps:
            return {}
        k = min(i - TP_WARMUP, WINDOW)
        total = per_step * k / tps  # seconds in the window after this step
        evicted = counted[-WINDOW] if len(counted) >= WINDOW else 0.0
        sec = total - prev_sum + evicted
        counted.append(sec)
        prev_sum = total
        out[row["step"]] = sec
    return out


def run_stats(rows: list[dict], warmup: int) -> dict:
    """Throughput, memory and steps of one run; steps of its first `warmup` (within the process) excluded."""
    if not rows:
        return {"present": False}
    first, last = rows[0]["step"], rows[-1]["step"]
    per_step = rows[0]["tokens_seen"] / rows[0]["step"]  # tokens_seen counts from step 0, also after a resume
    secs = step_seconds(rows)
    measured = [s for s in secs if s - first + 1 > warmup]
    if measured:
        tps = statistics.median(per_step / secs[s] for s in measured)
        how = f"median of steps {measured[0]}-{measured[-1]}"
    else:
        logged = [r["tokens_per_s"] for r in rows if r.get("tokens_per_s")]
        tps = logged[-1] if logged else math.nan
        how = "rolling mean of the last logged step" if logged else "none logged"
    mfus = [r["mfu"] for r in rows if r.get("mfu") is not None and r["step"] - first + 1 > warmup]
    return {
        "present": True, "first_step": first, "last_step": last, "tokens_per_step": per_step,
        "tokens_per_s": tps, "tokens_per_s_how": how, "step_seconds": secs,
        "mfu": statistics.median(mfus) if mfus else math.nan,
        "peak_memory_gb": max((r.get("peak_memory_gb", 0.0) for r in rows), default=math.nan),
        "seq_len": rows[-1].get("seq_len"),
        "loss": {r["step"]: r["loss"] for r in rows},
    }


def rel_diffs(a: dict[int, float], b: dict[int, float]) -> dict[int, float]:
    """step -> |a - b| / |b| over the steps both have."""
    return {s: abs(a[s] - b[s]) / max(abs(b[s]), 1e-12) for s in sorted(set(a) & set(b))}


def agreement(a: dict[int, float], b: dict[int, float]) -> dict:
    d = rel_diffs(a, b)
    if not d:
        return {"steps": 0}
    worst = max(d, key=d.get)
    return {"steps": len(d), "max_rel": d[worst], "max_at": worst, "mean_rel": statistics.fmean(d.values()),
            "first": min(d), "last": max(d)}


def resume_check(one: dict, two: dict, res: dict, ckpt_step: int, log: str, tol: float) -> dict:
    """Did the resumed run load the N-GPU checkpoint: step continues, loss continues (not a fresh start)?"""
    out: dict = {"ok": False, "ckpt_step": ckpt_step}
    match = re.search(r"resumed from (\S+) at step (\d+)", log)
    out["log_line"] = match.group(0) if match else None
    out["log_step"] = int(match.group(2)) if match else None
    out["reseed_warning"] = bool(re.search(r"written by \d+ ranks, this run has \d+", log))
    if not res.get("present"):
        out["why"] = "the resumed run logged no step"
        return out
    first = res["first_step"]
    out["first_step"] = first
    reasons = []
    if first != ckpt_step + 1:
        reasons.append(f"first logged step {first}, expected {ckpt_step + 1}")
    if out["log_step"] != ckpt_step:
        reasons.append(f"log says resumed at step {out['log_step']}, expected {ckpt_step}")
    loss0 = res["loss"][first]
    out["first_loss"] = loss0
    ref = two.get("loss", {}).get(first)
    if ref is not None:
        out["two_loss"] = ref
        out["rel_vs_two"] = abs(loss0 - ref) / abs(ref)
        if out["rel_vs_two"] > tol:
            reasons.append(f"first resumed loss {loss0:.4f} vs N-GPU {ref:.4f} at step {first}: "
                           f"rel {out['rel_vs_two']:.2e} > {tol}")
    else:
        reasons.append(f"the N-GPU run has no loss at step {first} to compare with")
    start = one.get("loss", {}).get(1) or two.get("loss", {}).get(1)
    if start is not None and ref is not None and abs(loss0 - start) <= abs(loss0 - ref):
        reasons.append(f"first resumed loss {loss0:.4f} is nearer the step-1 loss {start:.4f} than the N-GPU "
                       f"run's {ref:.4f} (a fresh start?)")
    out["vs_one"] = agreement(res["loss"], one.get("loss", {}))
    out["vs_two"] = agreement(res["loss"], two.get("loss", {}))
    out["ok"] = not reasons
    out["why"] = "; ".join(reasons)
    return out


def _f(x: float, spec: str) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _agree_text(a: dict) -> str:
    if not a.get("steps"):
        return "—"
    return f"max rel {a['max_rel']:.2e} (step {a['max_at']}), mean {a['mean_rel']:.2e}, steps {a['first']}–{a['last']}"


def criterion_line(agree: dict, tol: float, nproc: int) -> str:
    """The 1 vs N GPU loss agreement verdict, with the criterion spelt out."""
    rule = f"max over steps s of |L_{nproc}(s) − L_1(s)| / |L_1(s)| ≤ {tol:.1e}"
    if not agree.get("steps"):
        return f"**Loss agreement 1 vs {nproc} GPUs: NOT MEASURED** (criterion: {rule}; no step logged by both runs)"
    verdict = "PASS" if agree["max_rel"] <= tol else "FAIL"
    return (f"**Loss agreement 1 vs {nproc} GPUs: {verdict}** (criterion: {rule}): max rel {agree['max_rel']:.2e} at "
            f"step {agree['max_at']}, mean {agree['mean_rel']:.2e}, {agree['steps']} steps "
            f"({agree['first']}–{agree['last']})")


def report(one: dict, two: dict, res: dict, check: dict, nproc: int, title: str, tol: float | None = None,
           show_resume: bool = True) -> str:
    lines = [f"## {title}", ""]
    if tol is not None:
        lines += [criterion_line(agreement(two.get("loss", {}), one.get("loss", {})), tol, nproc), ""]
    base = one.get("tokens_per_s", math.nan) if one.get("present") else math.nan
    last = " resume check |" if show_resume else ""
    lines += ["| run | GPUs | steps | tokens/s (global) | tokens/s per GPU | scaling efficiency | MFU (bf16 peak) "
              "| peak memory GB (rank 0) | loss agreement |" + last,
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if show_resume else "")]
    runs = [("1-GPU", 1, one), (f"{nproc}-GPU FSDP2", nproc, two)]
    runs += [(f"resume {nproc}→1", 1, res)] if show_resume else []
    for name, gpus, s in runs:
        if not s.get("present"):
            lines.append(f"| {name} | {gpus} | missing | — | — | — | — | — | — |" + (" — |" if show_resume else ""))
            continue
        eff = "baseline" if s is one else "—"
        agree = "—"
        if s is two:
            eff = _f(s["tokens_per_s"] / (nproc * base) * 100, ".1f") + "%" if base == base and base else "—"
            agree = "vs 1-GPU: " + _agree_text(agreement(two["loss"], one.get("loss", {})))
        res_cell = "—"
        if s is res:
            agree = ("vs 1-GPU: " + _agree_text(check.get("vs_one", {})) + "; vs "
                     f"{nproc}-GPU: " + _agree_text(check.get("vs_two", {})))
            res_cell = ("ok" if check["ok"] else "FAILED") + f": from step {check['ckpt_step']} checkpoint"
            if check.get("first_step") is not None:
                res_cell += (f", first step {check['first_step']}, loss {_f(check.get('first_loss'), '.4f')} vs "
                             f"{nproc}-GPU {_f(check.get('two_loss'), '.4f')}")
            if check.get("why"):
                res_cell += f" ({check['why']})"
        elif s is two and show_resume:
            res_cell = f"wrote checkpoint step {check['ckpt_step']}"
        tps = s["tokens_per_s"]
        lines.append(
            f"| {name} | {gpus} | {s['first_step']}–{s['last_step']} | {_f(tps, ',.0f')} | {_f(tps / gpus, ',.0f')} "
            f"| {eff} | {_f(s['mfu'], '.3f')} | {_f(s['peak_memory_gb'], '.1f')} | {agree} |"
            + (f" {res_cell} |" if show_resume else ""))
    lines.append("")
    for name, s in (("1-GPU", one), (f"{nproc}-GPU", two), ("resume", res)):
        if s.get("present") and (show_resume or s is not res):
            lines.append(f"- {name}: {s['tokens_per_step']:,.0f} tokens/step, seq_len {s['seq_len']}, "
                         f"tokens/s = {s['tokens_per_s_how']}")
    if show_resume and check.get("log_line"):
        lines.append(f"- resume log: `{check['log_line']}`"
                     + (" (per-rank RNG re-seeded: written by another world size)" if check["reseed_warning"] else ""))
    cols = ["step", "1-GPU", f"{nproc}-GPU", *(["resumed"] if show_resume else []), f"rel {nproc}-GPU vs 1",
            *(["rel resumed vs 1", f"rel resumed vs {nproc}"] if show_resume else []), "tokens/s 1-GPU",
            f"tokens/s {nproc}-GPU"]
    lines += ["", "Per-step training loss (rel = |a − b| / |b|) and step tokens/s:", "",
              "| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    if not show_resume:
        res = {}
    steps = sorted(set(one.get("loss", {})) | set(two.get("loss", {})) | set(res.get("loss", {})))
    for st in steps:
        a, b, c = (s.get("loss", {}).get(st) for s in (one, two, res))
        r21 = abs(b - a) / abs(a) if a is not None and b is not None else None
        rr1 = abs(c - a) / abs(a) if a is not None and c is not None else None
        rr2 = abs(c - b) / abs(b) if b is not None and c is not None else None
        t1, t2 = (s["tokens_per_step"] / s["step_seconds"][st] if s.get("step_seconds", {}).get(st) else None
                  for s in (one, two))
        cells = [st, _f(a, '.4f'), _f(b, '.4f'), *([_f(c, '.4f')] if show_resume else []), _f(r21, '.2e'),
                 *([_f(rr1, '.2e'), _f(rr2, '.2e')] if show_resume else []), _f(t1, ',.0f'), _f(t2, ',.0f')]
        lines.append("| " + " | ".join(str(x) for x in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", type=Path, required=True, help="run_dir of the 1-GPU run")
    ap.add_argument("--two", type=Path, required=True, help="run_dir of the N-GPU run")
    ap.add_argument("--resume", type=Path, help="run_dir of the 1-GPU run resumed from the N-GPU checkpoint")
    ap.add_argument("--resume-log", type=Path, help="its console log (stderr says 'resumed from ... at step K')")
    ap.add_argument("--ckpt-step", type=int, default=0, help="step of the N-GPU checkpoint it resumed from")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=4, help="first steps of each process left out of tokens/s")
    ap.add_argument("--tol", type=float, default=0.02, help="resume check: max rel loss diff vs the N-GPU run")
    ap.add_argument("--agree-tol", type=float, default=None,
                    help="loss agreement criterion: max rel |L_N - L_1| / |L_1| over the shared steps (PASS/FAIL line)")
    ap.add_argument("--title", default="Multi-GPU scaling")
    ap.add_argument("--json", type=Path, help="also write every number here")
    args = ap.parse_args(argv)
    one, two, res = (run_stats(load_rows(d), args.warmup) for d in (args.one, args.two, args.resume))
    log = args.resume_log.read_text(errors="replace") if args.resume_log and args.resume_log.is_file() else ""
    check = resume_check(one, two, res, args.ckpt_step, log, args.tol)
    show_resume = args.resume is not None
    print(report(one, two, res, check, args.nproc, args.title, args.agree_tol, show_resume), end="")
    result = {"one": one, "two": two, "nproc": args.nproc}
    if show_resume:
        result.update(resume=res, resume_check=check)
    if one.get("present") and two.get("present"):
        result["scaling_efficiency"] = two["tokens_per_s"] / (args.nproc * one["tokens_per_s"])
        result["loss_agreement"] = agreement(two["loss"], one["loss"])
        if args.agree_tol is not None and result["loss_agreement"].get("steps"):
            result["loss_agreement"].update(tol=args.agree_tol,
                                            ok=result["loss_agreement"]["max_rel"] <= args.agree_tol)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main()
