"""Reporting half of scripts/bench_train.py: kernel-time breakdown, bf16 ratios, table, regression JSON.

    torch.profiler kernels ─▶ classify(name) ─▶ ms per step: attn_fwd | attn_bwd | attn_quant | linears | other
    rows ─▶ add_bf16_ratios ─▶ compare(baseline) ─▶ markdown / console lines ─▶ record(baseline) (--record)

Why kernel names and not CUDA events in forward hooks: the backward pass runs on the autograd
thread where module hooks see nothing of attention's own backward kernels, and events around
an asynchronous launch measure the launch, not the kernel. The profiler's device-side kernel
durations are exact whatever overlaps; the price is a name table, kept here in one place.
Kernels no rule claims land in `other`, and the JSON keeps the largest of them (`top_other`)
so a renamed library kernel shows up instead of silently skewing the split.

Never imported by the package; scripts/bench_train.py and tests/test_bench_train.py use it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

CATEGORIES = ("attn_fwd", "attn_bwd", "attn_quant", "linears", "other")

# FLAMIA's Triton kernels (kernels/attention_fwd.py, attention_bwd.py) and the attention library
# kernels SDPA dispatches to (cuDNN "sdpa ... fprop/bprop", FlashAttention-2 "flash_fwd/bwd",
# memory-efficient "fmha_cutlassF/B"); on the CPU the aten op names themselves.
_ATTENTION = re.compile(r"_fwd_kernel|_dkdv_kernel|_dq_kernel|flash|fmha|sdpa|cudnn|attention", re.I)
_ATTENTION_BWD = re.compile(r"bwd|bprop|backward|cutlassB|_dkdv_|_dq_|dot_do_o|convert_dq", re.I)
# FLAMIA's operand pre-pass (kernels/quantize.py): per-token scales and FP8/MX/NV bytes of q, k, v, dO,
# the off-diagonal K/V copies and the backward's fused delta.
_ATTENTION_QUANT = re.compile(
    r"_fp8_tokens_kernel|_fp8_key_side_kernel|_fp8_requant_blocks_kernel|_fp8_tokens_delta_kernel|_mxfp8_kernel"
    r"|_nvfp4_kernel")
# The linears' fused FP8 operand quantizer (kernels/linear_prepass.py): part of what an FP8 GEMM costs.
_LINEAR_QUANT = re.compile(r"_fp8_operand_kernel|_row_amax_kernel|_row_bytes_kernel")
# GEMMs: cuBLAS (nvjet_*, sm90_xmma_*, *gemm*), CUTLASS (_scaled_mm rowwise/blockwise), aten mm on CPU.
_LINEAR = re.compile(r"gemm|cutlass|scaled_mm|nvjet|cublas|xmma|wgmma|matmul|aten::mm|aten::addmm|aten::bmm",
                     re.I)


def classify(name: str) -> str:
    """The breakdown category of one kernel (CUDA) or aten op (CPU) name; attention rules first."""
    if _ATTENTION_QUANT.search(name):
        return "attn_quant"
    if _ATTENTION.search(name):
        return "attn_bwd" if _ATTENTION_BWD.search(name) else "attn_fwd"
    if _LINEAR.search(name) or _LINEAR_QUANT.search(name):
        return "linears"
    return "other"


def kernel_times_us(prof, on_cuda: bool) -> dict[str, float]:
    """{kernel name: total device µs} from a finished torch.profiler.profile.

    On CUDA only device-side kernel events count (a CPU op's device time would count its
    kernels twice), and not the device-side copies of `record_function` ranges (user
    annotations such as "Optimizer.step#AdamW.step": their time is that of the kernels inside,
    which count already; before session 4 they did count, so `other` and `busy` ran high, busy
    above 100%). On the CPU every op's self time counts, which is indicative only.
    """
    from torch.autograd import DeviceType

    out: dict[str, float] = {}
    for avg in prof.key_averages():
        if on_cuda:
            if avg.device_type != DeviceType.CUDA or getattr(avg, "is_user_annotation", False):
                continue
            us = avg.self_device_time_total
        else:
            us = avg.self_cpu_time_total
        if us > 0:
            out[avg.key] = out.get(avg.key, 0.0) + float(us)
    return out


def breakdown(kernel_us: dict[str, float], steps: int, wall_ms: float, top: int = 5) -> dict:
    """Milliseconds per optimizer step per category, the busy fraction and the largest `other` kernels.

    `wall_ms` is the profiled steps' wall time per step: busy = kernel time / wall time
    (< 1 means the GPU waited on the host; > 1 is possible with overlapping streams).
    """
    per_step = {c: 0.0 for c in CATEGORIES}
    others = []
    for name, us in kernel_us.items():
        category = classify(name)
        per_step[category] += us / 1e3 / steps
        if category == "other":
            others.append((us / 1e3 / steps, name))
    total = sum(per_step.values())
    return {
        "ms": {c: round(v, 3) for c, v in per_step.items()},
        "busy": round(total / wall_ms, 3) if wall_ms > 0 else None,
        "top_other": [[name[:120], round(ms, 3)] for ms, name in sorted(others, reverse=True)[:top]],
    }


# ---------------------------------------------------------------------- ratios and regression

def row_key(row: dict) -> str:
    """The identity of a row across runs: model / recipe label / context."""
    return f"{row['model']}/{row['recipe']}/{row['context']}"


def add_bf16_ratios(rows: list[dict], reference: str = "bf16") -> None:
    """Set row['vs_bf16'] = tokens/s over the `reference` row of the same model and context (same process)."""
    base = {(r["model"], r["context"]): r.get("tokens_per_s") for r in rows
            if r["recipe"] == reference and r["status"] == "ok"}
    for r in rows:
        ref = base.get((r["model"], r["context"]))
        r["vs_bf16"] = round(r["tokens_per_s"] / ref, 4) if ref and r["status"] == "ok" else None


def load_baseline(path: Path) -> dict:
    """The recorded results ({"rows": {key: row}}); empty when the file does not exist yet."""
    if not path.is_file():
        return {"rows": {}}
    data = json.loads(path.read_text())
    if not isinstance(data.get("rows"), dict):
        raise ValueError(f"{path}: not a bench_train baseline (no 'rows' mapping)")
    return data


def compare(rows: list[dict], baseline: dict) -> None:
    """Set row['previous'] (the last recorded tokens/s or status) and row['change'] (fraction, +0.05 = 5% faster)."""
    for r in rows:
        prev = baseline["rows"].get(row_key(r))
        r["previous"] = r["change"] = r["setup_differs"] = None
        if prev is None:
            continue
        r["previous"] = prev.get("tokens_per_s") if prev.get("status") == "ok" else prev.get("status")
        r["setup_differs"] = prev.get("setup") != r.get("setup")  # batch, data or overrides changed since
        if r["status"] == "ok" and prev.get("status") == "ok" and prev.get("tokens_per_s"):
            r["change"] = round(r["tokens_per_s"] / prev["tokens_per_s"] - 1, 4)


_RECORDED = ("model", "recipe", "context", "seq_len", "micro_batch", "accum", "setup", "status", "tokens_per_s",
             "step_ms", "mfu", "mfu_weighted", "peak_mem_gb", "vs_bf16", "breakdown")


def record(rows: list[dict], baseline: dict, meta: dict) -> dict:
    """A new baseline: `baseline` with each row of this run replacing its key's entry (OOM rows too)."""
    out = {**baseline, "rows": dict(baseline["rows"])}
    stamp = {k: meta.get(k) for k in ("commit", "date", "device", "torch", "command")}
    for r in rows:
        if r["status"] in ("ok", "OOM"):
            out["rows"][row_key(r)] = {**{k: r.get(k) for k in _RECORDED}, **stamp}
    out["rows"] = dict(sorted(out["rows"].items()))
    return out


# ---------------------------------------------------------------------- text

def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _change(r: dict) -> str:
    note = ", other setup" if r.get("setup_differs") else ""
    if r.get("change") is not None:
        return f"{100 * r['change']:+.1f}% (was {r['previous']:,.0f}{note})"
    if r.get("previous") is not None:
        was = r["previous"] if isinstance(r["previous"], str) else f"{r['previous']:,.0f}"
        return f"was {was}{note}"
    return "new"


def _ms(r: dict, category: str) -> str:
    b = r.get("breakdown") or {}
    return f"{b['ms'][category]:.1f}" if b.get("ms") else "n/a"


COLUMNS = ("recipe", "context", "batch", "tokens/s", "vs bf16", "MFU bf16", "MFU weighted", "peak mem GB",
           "attn fwd ms", "attn bwd ms", "attn quant ms", "linears ms", "other ms", "busy", "vs last")


def table_cells(r: dict) -> list[str]:
    """One row of the results table as strings (COLUMNS order)."""
    head = [r["recipe"], r["context"], f"{r['micro_batch']}x{r['accum']}"]
    if r["status"] != "ok":
        return head + [r["status"]] + ["-"] * (len(COLUMNS) - 5) + [_change(r)]
    b = r.get("breakdown") or {}
    return head + [
        f"{r['tokens_per_s']:,.0f}",
        "n/a" if r.get("vs_bf16") is None else f"{r['vs_bf16']:.2f}x",
        _pct(r.get("mfu")), _pct(r.get("mfu_weighted")),
        "n/a" if r.get("peak_mem_gb") is None else f"{r['peak_mem_gb']:.1f}",
        *(_ms(r, c) for c in CATEGORIES),
        "n/a" if b.get("busy") is None else f"{100 * b['busy']:.0f}%",
        _change(r),
    ]


def markdown(rows: list[dict], meta: dict) -> str:
    """The results as a markdown page: what ran (command, commit, date, device) and one table."""
    lines = [
        f"# bench_train: {meta.get('model')} on {meta.get('device')}",
        "",
        f"Command: `{meta.get('command')}`  ",
        f"Commit {meta.get('commit')}, {meta.get('date')}, torch {meta.get('torch')}; "
        f"{meta.get('tokens_per_step'):,} tokens per optimizer step (batch = micro-batch x accumulation), "
        f"{meta.get('data')} data, {meta.get('warmup')} warm-up + {meta.get('steps')} measured steps "
        f"(tokens/s = median), breakdown over {meta.get('profile_steps')} profiled steps (ms per step).",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + " --- |" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(table_cells(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def console_line(r: dict) -> str:
    """One line per finished row, printed as the grid runs."""
    return "  ".join(f"{k}={v}" for k, v in zip(COLUMNS, table_cells(r), strict=True))
