"""The dK and dQ products in FP8 under bound scales (launch options fp8_dk, fp8_dq; `reference.dk_row_scale`,
`reference.dq_row_scale`) on the H200: accuracy against the reference's math and fp32 attention, and the two backward
kernels' times against bf16 dS products.

    python scripts/ds_fp8_probe.py --seqs 8192 16384 --rounds 3

Why: the dK/dV and dQ kernels run dK = dSᵀ·Q and dQ = dS·K on bf16 tensor cores (half the dQ kernel's products'
tensor-core time). A per-row amax scale for dS cost more than the product saved (+15% on dK/dV,
scripts/bwd_fp8_probe.py); a bound known before the backward runs needs no reduction in the kernels, and on the CPU
it is as accurate as the exact amax (tests/test_fp8_ds_bounds.py). Here the kernels' FP8_DK / FP8_DQ forms run for
real: dK, dQ compared with `reference.backward_math(fp8_dk=True, fp8_dq=True)` on the same inputs (the other
gradients with the default launch's, bit for bit), then timed against the default in interleaved rounds
(torch.profiler, each kernel alone: the probes' ρ, Q8ᵀ and K8ᵀ come from PyTorch here, which a real launch would take
from dO's pre-pass and the copies pass). Needs CUDA (sm_90)."""
from __future__ import annotations

import argparse
import math
import statistics

import torch
from flamia_kernels import attention_bwd_gluon as G
from flamia_kernels import attention_dkdv_ws as W
from flamia_kernels import flamia_attention
from flamia_kernels import formats as F
from flamia_kernels import reference as R
from flamia_kernels.attention_operands import prepare_forward, quantize_operand
from flamia_kernels.spec import SEQ_BLOCK, AttentionSpec
from launch_configs import launch_overrides

PROBE = {"bwd": {"fp8_dk": True, "fp8_dq": True}}


def grads(q, k, v, do, launch=None):
    xs = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    with launch_overrides(launch):
        flamia_attention(*xs, "fp8-bf16dq").backward(do)  # bf16 dS: the probes set fp8_dq
    return [x.grad.float() for x in xs]


def reference_grads(q, k, v, do, fp8: bool):
    spec, sm = AttentionSpec.parse("fp8-bf16dq"), 1.0 / math.sqrt(q.shape[-1])
    ops = prepare_forward(q, k, v, spec, True, F, SEQ_BLOCK, off_diagonal=True)
    o, m, l = R.forward_math(ops, spec, True, True, sm)
    do8 = quantize_operand(do, spec.do, F)
    delta = R.backward_delta(do8, R._quantize_output(o.to(q.dtype), spec.do, F))
    m, linv = R.unpack_stats(*R.pack_stats(m, l))
    return R.backward_math(ops, spec, do8, delta, m, linv, True, True, sm, fp8_dk=fp8, fp8_dq=fp8)


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
    print(f"S={seq} (B=1, Hq=8, Hkv=4, GQA): dV of the FP8 dS products bit-identical to the default's: "
          f"{torch.equal(base[2], probe[2])}")
    for i, name in ((0, "dQ"), (1, "dK")):
        print(f"  {name} kernel vs reference, same math: bf16 dS {rel(base[i], ref_bf16[i]):.2e}, "
              f"FP8 dS {rel(probe[i], ref_fp8[i]):.2e}")
        for label, got in (("bf16 (default)", base[i]), ("FP8 (probe)", probe[i]), ("reference bf16", ref_bf16[i]),
                           ("reference FP8", ref_fp8[i])):
            print(f"    {name} {label:15s} vs fp32: rel-L2 {rel(got, exact[i]):.4f}, cosine {cos(got, exact[i]):.5f}")


def kernel_times(seq: int, rounds: int) -> None:
    b, h = max(1, 32768 // seq), 16
    gen = torch.Generator(device="cuda").manual_seed(seq + 1)
    q, k, v, do = (torch.randn(b, h, seq, 128, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(4))
    variants = {"bf16 dS (default)": (None, W.STAGES, G.DQ_STAGES),
                "FP8 dS": (PROBE, W.STAGES, G.DQ_STAGES),
                "FP8 dS, 5 / 3 stages": (PROBE, 5, {**G.DQ_STAGES, 32: 3})}
    stages0 = (W.STAGES, G.DQ_STAGES)
    kernels = {"dK/dV": "_dkdv_ws_kernel", "dQ": "_dq_gluon_kernel"}
    times: dict = {(name, kern): [] for name in variants for kern in kernels}
    for _ in range(rounds):
        for name, (launch, stages, dq_stages) in variants.items():
            W.STAGES, G.DQ_STAGES = stages, dq_stages
            grads(q, k, v, do, launch)  # warm-up / compile
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    grads(q, k, v, do, launch)
                torch.cuda.synchronize()
            for kern, pattern in kernels.items():
                us = [e.device_time for e in prof.events() if pattern in e.name]
                times[(name, kern)].append(statistics.median(us))
    W.STAGES, G.DQ_STAGES = stages0
    print(f"S={seq} (B={b}, H={h}): kernel µs (median of 3 calls, {rounds} interleaved rounds)")
    for (name, kern), us in times.items():
        runs = " ".join(f"{t:8.1f}" for t in us)
        print(f"  {kern:6s} {name:22s} {runs}   median {statistics.median(us):8.1f}")


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
