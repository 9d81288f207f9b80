"""The dK product in FP8 under bound scales (launch option fp8_dk, `reference.dk_row_scale`) on the H200: its accuracy
against the reference's math and fp32 attention, and the warp-specialized dK/dV kernel's time against bf16 dK.

    python scripts/dk_fp8_probe.py --seqs 8192 16384 --rounds 4

Why: the dK/dV kernel runs dK = dSᵀ·Q on bf16 tensor cores, a third of its products' tensor-core time since dV went
FP8 (session 16). A per-key amax scale for dSᵀ cost more than the product saved (+15%, scripts/bwd_fp8_probe.py);
a bound known before the backward runs needs no reduction in the kernel, and on the CPU it is as accurate as the
exact amax (tests/test_fp8_dk_bound.py). Here the kernel's FP8_DK form runs for real: dK compared with
`reference.backward_math(fp8_dk=True)` on the same inputs (and dQ, dV with the default launch's, bit for bit), then
timed against the default in interleaved rounds (torch.profiler, the dK/dV kernel alone: the probe's ρ and Q8ᵀ come
from PyTorch here, which a real launch would take from dO's pre-pass and the copies pass). Needs CUDA (sm_90)."""
from __future__ import annotations

import argparse
import math
import statistics

import torch
from flamia_kernels import attention_dkdv_ws as W
from flamia_kernels import flamia_attention
from flamia_kernels import formats as F
from flamia_kernels import reference as R
from flamia_kernels.attention_operands import prepare_forward, quantize_operand
from flamia_kernels.spec import SEQ_BLOCK, AttentionSpec
from launch_configs import launch_overrides

PROBE = {"bwd": {"fp8_dk": True}}


def grads(q, k, v, do, launch=None):
    xs = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    with launch_overrides(launch):
        flamia_attention(*xs, "fp8").backward(do)
    return [x.grad.float() for x in xs]


def reference_grads(q, k, v, do, fp8_dk: bool):
    spec, sm = AttentionSpec.parse("fp8"), 1.0 / math.sqrt(q.shape[-1])
    ops = prepare_forward(q, k, v, spec, True, F, SEQ_BLOCK, off_diagonal=True)
    o, m, l = R.forward_math(ops, spec, True, True, sm)
    do8 = quantize_operand(do, spec.do, F)
    delta = R.backward_delta(do8, R._quantize_output(o.to(q.dtype), spec.do, F))
    m, linv = R.unpack_stats(*R.pack_stats(m, l))
    return R.backward_math(ops, spec, do8, delta, m, linv, True, True, sm, fp8_dk=fp8_dk)


def rel(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def cos(a, b) -> float:
    return torch.nn.functional.cosine_similarity(a.flatten().double(), b.flatten().double(), dim=0).item()


def accuracy(seq: int) -> None:
    gen = torch.Generator(device="cuda").manual_seed(seq)
    q, do = (torch.randn(1, 8, seq, 128, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(1, 4, seq, 128, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(2))
    base, probe = grads(q, k, v, do), grads(q, k, v, do, PROBE)
    ref_bf16, ref_fp8 = reference_grads(q, k, v, do, False), reference_grads(q, k, v, do, True)
    xs = [x.float().requires_grad_(True) for x in (q, k, v)]
    torch.nn.functional.scaled_dot_product_attention(*xs, is_causal=True, enable_gqa=True).backward(do.float())
    exact = [x.grad for x in xs]
    print(f"S={seq} (B=1, Hq=8, Hkv=4, GQA): dQ, dV of fp8_dk bit-identical to the default's: "
          f"{torch.equal(base[0], probe[0])}, {torch.equal(base[2], probe[2])}")
    print(f"  dK kernel vs reference, same math: bf16 dK {rel(base[1], ref_bf16[1]):.2e}, "
          f"FP8 dK {rel(probe[1], ref_fp8[1]):.2e}")
    for name, got in (("bf16 dK (default)", base[1]), ("FP8 dK (fp8_dk)", probe[1]),
                      ("reference bf16 dK", ref_bf16[1]), ("reference FP8 dK", ref_fp8[1])):
        print(f"  {name:18s} vs fp32: rel-L2 {rel(got, exact[1]):.4f}, cosine {cos(got, exact[1]):.5f}")


def kernel_times(seq: int, rounds: int) -> None:
    b, h = max(1, 32768 // seq), 16
    gen = torch.Generator(device="cuda").manual_seed(seq + 1)
    q, k, v, do = (torch.randn(b, h, seq, 128, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(4))
    variants = {"bf16 dK (default)": (None, W.STAGES), "FP8 dK": (PROBE, W.STAGES), "FP8 dK, 5 stages": (PROBE, 5)}
    stages0 = W.STAGES
    times: dict = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (launch, stages) in variants.items():
            W.STAGES = stages
            grads(q, k, v, do, launch)  # warm-up / compile
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    grads(q, k, v, do, launch)
                torch.cuda.synchronize()
            us = [e.device_time for e in prof.events() if "_dkdv_ws_kernel" in e.name]
            times[name].append(statistics.median(us))
    W.STAGES = stages0
    print(f"S={seq} (B={b}, H={h}): the ws dK/dV kernel, µs (median of 3 calls, {rounds} interleaved rounds)")
    for name, us in times.items():
        print(f"  {name:18s} " + " ".join(f"{t:8.1f}" for t in us) + f"   median {statistics.median(us):8.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accuracy-seq", type=int, default=2048)
    ap.add_argument("--seqs", type=int, nargs="+", default=[8192, 16384])
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    accuracy(args.accuracy_seq)
    for seq in args.seqs:
        kernel_times(seq, args.rounds)


if __name__ == "__main__":
    main()
