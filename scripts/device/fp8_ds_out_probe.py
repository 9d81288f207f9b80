"""Launch options ds_out with fp8_dq (session 26): the dS buffer in E4M3 under the queries' bound scales ρ
(`reference.dq_row_scale`), half the bytes each way, and `dq_from_ds` as an FP8 product. Accuracy against fp32
attention at the issue's consistency shape (N(0,1), S = 4096, D = 128), the default launch beside it.

    python scripts/device/fp8_ds_out_probe.py [--seq 4096]

Why: at S = 8k the dS traffic (4.4 GB written by the dK/dV kernel, read by dq_from_ds) is the backward's new cost
(docs/benchmarks.md, session 25); this is the numerics it would cost. Needs CUDA (sm_90)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from flamia_kernels import flamia_attention

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: launch_configs
from launch_configs import launch_overrides  # noqa: E402

FP8_DS = {"bwd": {"fp8_dq": True, "ds_fp8": True}}


def grads(q, k, v, do, launch=None):
    xs = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    with launch_overrides(launch):
        o = flamia_attention(*xs, "fp8-bf16dq")  # bf16 dS: FP8_DS sets the fp8 buffer
        o.backward(do)
    return [o.float()] + [x.grad.float() for x in xs]


def cos(a, b) -> float:
    return torch.nn.functional.cosine_similarity(a.flatten().double(), b.flatten().double(), dim=0).item()


def rel(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", type=int, default=4096)
    args = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    for hq, hkv in ((16, 16), (16, 4)):
        gen = torch.Generator(device="cuda").manual_seed(args.seq + hkv)
        q, do = (torch.randn(1, hq, args.seq, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
                 for _ in range(2))
        k, v = (torch.randn(1, hkv, args.seq, 128, device="cuda", generator=gen, dtype=torch.bfloat16)
                for _ in range(2))
        xs = [x.float().requires_grad_(True) for x in (q, k, v)]
        o = torch.nn.functional.scaled_dot_product_attention(*xs, is_causal=True, enable_gqa=True)
        o.backward(do.float())
        exact = [o.detach()] + [x.grad for x in xs]
        base, fp8 = grads(q, k, v, do), grads(q, k, v, do, FP8_DS)
        same = [torch.equal(base[i], fp8[i]) for i in (0, 2, 3)]
        print(f"S={args.seq}, B=1, Hq={hq}, Hkv={hkv}: O, dK, dV of the fp8 dS buffer bit-identical to the default's: "
              f"{same}")
        for i, name in enumerate(("O", "dQ", "dK", "dV")):
            print(f"  {name}: cosine vs fp32 default {cos(base[i], exact[i]):.5f} fp8 dS {cos(fp8[i], exact[i]):.5f};"
                  f" rel-L2 default {rel(base[i], exact[i]):.4f} fp8 dS {rel(fp8[i], exact[i]):.4f}")


if __name__ == "__main__":
    main()
