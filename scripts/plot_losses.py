"""Loss-curve PNGs and tables from bench_recipes.py / bench_parity.py JSON files (issues 4 and 6).

    # issue 4: one PNG per preset (bf16 drawn in grey for reference) and one with every preset
    python scripts/plot_losses.py results/recipes/recipes.json --out docs/figures --prefix recipes_
    # issue 6: the parity runs (one JSON per process) merged into one figure and a table
    python scripts/plot_losses.py --kind parity results/parity/bf16.json results/parity/flamia.json \
        --out docs/figures --prefix parity_ --table results/parity/parity.md

Rows of every file are merged in the order given (a preset already read is skipped: a second
call may rerun bf16 as its own baseline). Per-step train loss is noisy at small batches (the
stdlib corpus mixes code and prose), so curves are drawn raw (faint) with a centred moving
average of --smooth steps on top; every preset also gets its step-by-step gap to bf16, in
which the swings of the shared data order cancel.

--kind recipes: <prefix>loss_<preset>.png per preset, <prefix>loss_all.png, and the table
(final train loss, held-out loss, tokens/s, × the bf16 of the same process).
--kind parity: <prefix>loss.png with three panels, train loss (smoothed), its gap to bf16 and
the held-out loss at every point the runs measured, and a table of each preset's held-out gap to bf16 at the last
step both measured (issue 6 asks for the final one within 1%) and of every shared point.
Without --out only the table is printed (no matplotlib needed: the device machine does this).

PNGs need matplotlib (not a dependency of the package: `pip install matplotlib` wherever they
are made). Never imported by the package.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def load(paths: list[Path]) -> tuple[list[dict], list[dict]]:
    """(rows, metas) of every file, rows in the order given, each tagged with its file's index.

    A preset already read from an earlier file is skipped (say, the bf16 reference a second call
    ran again so that its own × bf16 column has a same-process baseline).
    """
    rows, metas = [], []
    for i, path in enumerate(paths):
        doc = json.loads(path.read_text())
        metas.append(doc["meta"])
        for row in doc["rows"]:
            if any(r["preset"] == row["preset"] for r in rows):
                print(f"{path}: {row['preset']} already read from an earlier file: skipped", file=sys.stderr)
                continue
            rows.append({**row, "file": i, "file_rows": [r["preset"] for r in doc["rows"]],
                         "same_file_bf16": next((r for r in doc["rows"] if r["preset"] == "bf16"), None)})
    return rows, metas


def smooth(values: list[float], window: int) -> tuple[list[int], list[float]]:
    """(steps, centred moving average) with steps 1-based; a window of 1 returns the values."""
    half = max(0, window // 2)
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - half): i + half + 1]
        out.append(sum(chunk) / len(chunk))
    return list(range(1, len(values) + 1)), out


def caption(metas: list[dict]) -> str:
    def field(key: str) -> str:
        return " / ".join(dict.fromkeys(str(m.get(key, "?")) for m in metas))

    shape = f"seq {field('seq_len')} × {field('micro_batch')} rows" if "seq_len" in metas[0] else ""
    return " · ".join(x for x in (field("model"), shape, field("device"), f"commit {field('commit')}",
                                  field("date")) if x)


def _window(rows: list[dict], requested: int) -> int:
    return requested or max(1, max(len(r["losses"]) for r in rows) // 40)


def _label(row: dict) -> str:
    return row["preset"] if row.get("complete", True) else f"{row['preset']} (stopped at {row['steps_done']})"


def _mean_of(window: int) -> str:
    return f" (mean of {window} steps)" if window > 1 else ""


def plot_gap(ax, rows: list[dict], base: dict, window: int) -> None:
    """Train loss minus bf16's, step by step, smoothed: the same data order makes the batch-to-batch
    swings (most of the curves' wiggle) cancel, so the recipe's own cost shows."""
    for r in rows:
        n = min(len(r["losses"]), len(base["losses"]))
        ax.plot(*smooth([a - b for a, b in zip(r["losses"][:n], base["losses"][:n], strict=True)], window),
                lw=1.2, label=_label(r), **({"color": r["color"]} if "color" in r else {}))
    ax.axhline(0.0, color="0.55", lw=0.8)
    ax.set(xlabel="step", ylabel="train loss − bf16")
    ax.legend(title="smoothed as above" if window > 1 else None, title_fontsize=8)


def plot_recipes(rows: list[dict], metas: list[dict], out: Path, prefix: str, window: int, plt) -> list[Path]:
    base = next((r for r in rows if r["preset"] == "bf16"), None)
    title, written = caption(metas), []
    for r in rows:
        fig, axes = plt.subplots(2 if base is not None and r is not base else 1, 1, figsize=(7, 6), squeeze=False,
                                 sharex=True, height_ratios=[3, 1.4] if base is not None and r is not base else [1])
        ax = axes[0][0]
        if base is not None and r is not base:
            ax.plot(*smooth(base["losses"], window), color="0.55", lw=1.2, label="bf16" + _mean_of(window))
        line, = ax.plot(*smooth(r["losses"], 1), lw=0.6, alpha=0.3)
        ax.plot(*smooth(r["losses"], window), lw=1.6, color=line.get_color(), label=_label(r) + _mean_of(window))
        ax.set(xlabel="" if len(axes) > 1 else "step", ylabel="train loss", title=f"{r['preset']}\n{title}")
        ax.title.set_fontsize(9)
        ax.legend()
        if len(axes) > 1:
            plot_gap(axes[1][0], [{**r, "color": line.get_color()}], base, window)
        fig.tight_layout()
        written.append(out / f"{prefix}loss_{r['preset']}.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    others = [r for r in rows if r is not base]
    fig, axes = plt.subplots(2 if base and others else 1, 1, figsize=(8, 7), squeeze=False, sharex=True,
                             height_ratios=[3, 1.6] if base and others else [1])
    ax = axes[0][0]
    for r in rows:
        line, = ax.plot(*smooth(r["losses"], window), lw=1.2, label=_label(r))
        r["color"] = line.get_color()
    ax.set(xlabel="" if len(axes) > 1 else "step", ylabel="train loss" + _mean_of(window),
           title=f"all presets\n{title}")
    ax.title.set_fontsize(9)
    ax.legend()
    if len(axes) > 1:
        plot_gap(axes[1][0], others, base, window)
    fig.tight_layout()
    written.append(out / f"{prefix}loss_all.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    return written


def plot_parity(rows: list[dict], metas: list[dict], out: Path, prefix: str, window: int, plt) -> list[Path]:
    base = next((r for r in rows if r["preset"] == "bf16"), rows[0])
    fig, (train, gap, held) = plt.subplots(1, 3, figsize=(16, 4.6))
    for r in rows:
        line, = train.plot(*smooth(r["losses"], window), lw=1.3, label=_label(r))
        r["color"] = line.get_color()
        evals = r.get("evals", [])
        held.plot([s for s, _ in evals], [loss for _, loss in evals], marker="o", ms=3.5, lw=1.3,
                  color=line.get_color(), label=_label(r))
    train.set(xlabel="step", ylabel="train loss" + _mean_of(window), title="train loss")
    plot_gap(gap, [r for r in rows if r is not base], base, window)
    gap.set_title(f"train loss − {base['preset']}, step by step")
    held.set(xlabel="step", ylabel="held-out loss", title="held-out loss")
    if all(r.get("evals") for r in rows):  # zoom on the part after the first steps' steep fall
        tail = [loss for r in rows for step, loss in r["evals"] if step >= max(r["steps_done"] // 4, 1)]
        if tail:
            pad = 0.25 * (max(tail) - min(tail)) + 0.02
            held.set_ylim(min(tail) - pad, max(tail) + 4 * pad)
    for ax in (train, held):
        ax.legend()
    fig.suptitle(f"loss parity: {' vs '.join(r['preset'] for r in rows)} — same seed and data order\n"
                 f"{caption(metas)}", fontsize=9)
    fig.tight_layout()
    path = out / f"{prefix}loss.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]


def recipes_table(rows: list[dict], metas: list[dict]) -> str:
    """Final train loss, held-out loss and tokens/s per preset; × bf16 against the same process's bf16."""
    lines = [f"`{m['command']}` — commit {m['commit']}, {m['date']}, {m['device']}" for m in metas]
    lines += ["", "| preset | steps | final train loss (mean of last 10) | held-out loss | tokens/s | × bf16 |",
              "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        base = r.get("same_file_bf16")
        ratio = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}" if base else "n/a"
        steps = str(r["steps"]) if r.get("complete", True) else f"{r['steps_done']} of {r['steps']} (stopped)"
        lines.append(f"| {r['preset']} | {steps} | {r['final_loss']:.4f} | {r['heldout_loss']:.4f} | "
                     f"{r['tokens_per_s']:,.0f} | {ratio} |")
    return "\n".join(lines) + "\n"


def parity_table(rows: list[dict], tolerance: float = 0.01) -> str:
    """Each preset's held-out gap to bf16 at the last step both measured, and every shared held-out point."""
    base = next((r for r in rows if r["preset"] == "bf16"), rows[0])
    base_evals = dict(map(tuple, base.get("evals", [])))
    lines = ["| preset | steps | first train loss | final train loss (mean of last 10) | held-out loss (step) | "
             f"vs {base['preset']} at the same step | within {tolerance:.0%} |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        evals = dict(map(tuple, r.get("evals", [])))
        common = max(set(evals) & set(base_evals), default=None)
        steps = str(r["steps_done"]) + ("" if r.get("complete", True) else f" of {r['steps']} (stopped)")
        held = f"{evals[max(evals)]:.4f} ({max(evals)})" if evals else "n/a"
        if common is None:
            versus = ok = "n/a"
        else:
            gap = evals[common] / base_evals[common] - 1
            versus, ok = f"{gap:+.2%} (step {common})", "yes" if abs(gap) <= tolerance else "no"
        lines.append(f"| {r['preset']} | {steps} | {r['losses'][0]:.4f} | {r['final_loss']:.4f} | {held} | "
                     f"{versus} | {ok} |")
    shared = sorted(set.intersection(*(set(s for s, _ in r.get("evals", [])) for r in rows)))
    if len(shared) > 1:
        lines += ["", "| step | " + " | ".join(r["preset"] for r in rows) + " |",
                  "| --- |" + " --- |" * len(rows)]
        for step in shared:
            cells = [f"{dict(map(tuple, r['evals']))[step]:.4f}" for r in rows]
            lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("files", nargs="+", type=Path, help="JSON files of bench_recipes.py / bench_parity.py")
    p.add_argument("--out", type=Path, help="directory for the PNGs (none: only the table, no matplotlib needed)")
    p.add_argument("--kind", choices=("recipes", "parity"), default="recipes")
    p.add_argument("--prefix", default="", help="file-name prefix, e.g. recipes_ or parity_")
    p.add_argument("--smooth", type=int, default=0, help="moving-average window in steps (0: steps/40)")
    p.add_argument("--table", type=Path, help="also write the table (markdown) here (it is printed either way)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows, metas = load(args.files)
    if not rows:
        raise SystemExit("no rows in " + ", ".join(map(str, args.files)))
    if args.out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        args.out.mkdir(parents=True, exist_ok=True)
        plot = plot_parity if args.kind == "parity" else plot_recipes
        for path in plot(rows, metas, args.out, args.prefix, _window(rows, args.smooth), plt):
            print(f"wrote {path}")
    table = parity_table(rows) if args.kind == "parity" else recipes_table(rows, metas)
    print("\n" + table)
    if args.table:
        args.table.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
