"""Pick the fastest launch config of each FLAMIA kernel from a bench_attention profile sweep.

    python scripts/bench_attention.py --seqs 8192 --dims 128 --presets fp8 --peers cudnn --profile \
        --fwd-configs 8x3,4x3:bm64 --bwd-configs 8x2x32:dkdv,4x2x32:half:dkdv,8x2x32:dq,4x2x32:bm64:dq --out r
    python scripts/pick_launch.py r/bench_attention.json --out r/launch.json
    python scripts/bench_attention.py --seqs 8192,16384,32768 --dims 128 --presets fp8 --launch r/launch.json

Reads the profile rows that timed one kernel alone (`fwd kernel <cfg>`, `bwd kernels <cfg>` with
`:dkdv` or `:dq`), and per kernel keeps the fastest config if it beats that kernel's **first** config
in the sweep (the baseline: list the default first) by more than --margin; otherwise the baseline.
Writes {"fwd": {...}, "bwd": {...}} as bench_attention's --launch takes it: the dQ kernel's choice
goes in as dq_warps / dq_stages / dq_sub / bm, the dK/dV kernel's as num_warps / num_stages / sub / bn.
Every config it can pick must already have passed the GPU tests that compare it with the default
(tests/test_attention_gpu.py's launch variants); this script only times. Never imported by the package.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# how each kernel's sweep options land in the launch file (bench_attention --launch)
DQ_KEYS = {"num_warps": "dq_warps", "num_stages": "dq_stages", "sub": "dq_sub", "bm": "bm"}
DKDV_KEYS = ("num_warps", "num_stages", "sub", "bn")
FWD_KEYS = ("num_warps", "num_stages", "bm", "BPTR", "CHAIN")


def best_per_kernel(rows: list[dict], margin: float) -> dict[str, dict]:
    """{kernel: {"baseline": row, "best": row}} over the profile rows of the first S in the sweep."""
    timed = [r for r in rows if r.get("kind") == "profile" and r.get("kernel") in ("fwd", "dkdv", "dq")
             and r.get("ms") == r.get("ms")]  # NaN: a config that failed
    if not timed:
        raise SystemExit("pick_launch: no per-kernel profile rows (run bench_attention --profile with "
                         "--fwd-configs and --bwd-configs ...:dkdv / ...:dq)")
    seq = timed[0]["S"]
    picks = {}
    for kernel in ("fwd", "dkdv", "dq"):
        mine = [r for r in timed if r["kernel"] == kernel and r["S"] == seq]
        if not mine:
            continue
        baseline = mine[0]
        fastest = min(mine, key=lambda r: r["ms"])
        best = fastest if fastest["ms"] < baseline["ms"] * (1.0 - margin) else baseline
        picks[kernel] = {"baseline": baseline, "best": best}
    return picks


def launch_file(picks: dict[str, dict]) -> dict:
    """bench_attention's --launch object from the picks."""
    out = {"fwd": {}, "bwd": {}}
    if "fwd" in picks:
        cfg = picks["fwd"]["best"]["config"]
        out["fwd"] = {k: cfg[k] for k in FWD_KEYS if k in cfg}
    if "dkdv" in picks:
        cfg = picks["dkdv"]["best"]["config"]
        out["bwd"].update({k: cfg[k] for k in DKDV_KEYS if k in cfg})
    if "dq" in picks:
        cfg = picks["dq"]["best"]["config"]
        out["bwd"].update({DQ_KEYS[k]: cfg[k] for k in DQ_KEYS if k in cfg})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("profile", type=Path, help="bench_attention.json of a --profile sweep")
    p.add_argument("--out", type=Path, required=True, help="where to write the --launch JSON")
    p.add_argument("--margin", type=float, default=0.02, help="a config must beat the baseline by this fraction")
    args = p.parse_args(argv)
    try:
        rows = json.loads(args.profile.read_text())["rows"]
    except (OSError, ValueError, KeyError) as err:
        raise SystemExit(f"pick_launch: cannot read {args.profile}: {err}") from err
    picks = best_per_kernel(rows, args.margin)
    for kernel, pick in picks.items():
        base, best = pick["baseline"], pick["best"]
        print(f"{kernel:5s} baseline {base['ms']:.3f} ms {base['config']} -> {best['ms']:.3f} ms {best['config']} "
              f"({base['ms'] / best['ms']:.3f}x)")
    launch = launch_file(picks)
    args.out.write_text(json.dumps(launch, indent=1) + "\n")
    print(f"launch: {json.dumps(launch)} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
