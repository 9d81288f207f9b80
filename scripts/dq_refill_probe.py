"""The Gluon dQ kernel's ring refill moved off its chain of waits (`attention_bwd_gluon.DQ_EARLY_REFILL`), with and
without the FP8 dQ product (launch option fp8_dq) and a third ring stage: bits against the default, then the dQ
kernel's time in interleaved rounds (torch.profiler).

    python scripts/dq_refill_probe.py --seqs 8192 16384 --rounds 3

Why: ~100 of the dQ kernel's 237 sm_90 instructions a sub-tile are the TMA issue of the next stage, run after the dQ
product retires and before the next sub-tile's S and dP are issued — in the chain each program waits through (the
kernel is neither tensor- nor issue-bound: docs/benchmarks.md, "Session 17"). Issued instead while the next S and dP
run, that work overlaps a product; the cost is registers (S and dP are live across it: 60 → 136 bytes spilled at
two stages). Needs CUDA (sm_90)."""
from __future__ import annotations

import argparse
import statistics

import torch
from ds_fp8_probe import grads
from flamia_kernels import attention_bwd_gluon as G

FP8_DQ = {"bwd": {"fp8_dq": True}}
# name: (launch overrides, DQ_EARLY_REFILL, DQ_STAGES[32])
VARIANTS = {"default": (None, False, 2), "early refill": (None, True, 2), "early refill, 3 stages": (None, True, 3),
            "FP8 dQ": (FP8_DQ, False, 2), "FP8 dQ, early refill, 3 stages": (FP8_DQ, True, 3)}


def use(early: bool, stages: int) -> None:
    G.DQ_EARLY_REFILL, G.DQ_STAGES = early, {**G.DQ_STAGES, 32: stages}


def bits(seq: int) -> None:
    gen = torch.Generator(device="cuda").manual_seed(seq)
    q, k, v, do = (torch.randn(2, 8, seq, 128, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(4))
    want = {}
    for name, (launch, early, stages) in VARIANTS.items():
        use(early, stages)
        dq = grads(q, k, v, do, launch)[0]
        key = launch is None
        if key in want:
            print(f"S={seq}: {name:32s} dQ bit-identical to its product's default: {torch.equal(dq, want[key])}")
        else:
            want[key] = dq


def times(seq: int, rounds: int) -> None:
    b, h = max(1, 32768 // seq), 16
    gen = torch.Generator(device="cuda").manual_seed(seq + 1)
    q, k, v, do = (torch.randn(b, h, seq, 128, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(4))
    us: dict = {name: [] for name in VARIANTS}
    for _ in range(rounds):
        for name, (launch, early, stages) in VARIANTS.items():
            use(early, stages)
            grads(q, k, v, do, launch)  # compile / warm up
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    grads(q, k, v, do, launch)
                torch.cuda.synchronize()
            us[name].append(statistics.median(e.device_time for e in prof.events() if "_dq_gluon_kernel" in e.name))
    print(f"S={seq} (B={b}, H={h}): the dQ kernel, µs (median of 3 calls, {rounds} interleaved rounds)")
    for name, runs in us.items():
        line = " ".join(f"{t:8.1f}" for t in runs)
        print(f"  {name:32s} {line}   median {statistics.median(runs):8.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", type=int, nargs="+", default=[8192, 16384])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    defaults = (G.DQ_EARLY_REFILL, dict(G.DQ_STAGES))
    bits(1920)
    for seq in args.seqs:
        times(seq, args.rounds)
    G.DQ_EARLY_REFILL, G.DQ_STAGES = defaults


if __name__ == "__main__":
    main()
