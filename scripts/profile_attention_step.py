"""One FLAMIA attention forward + backward at a benchmark shape, for a kernel profiler (Nsight Compute).

    ncu --clock-control none --kernel-name regex:'_fwd_kernel|_dkdv_kernel|_dq_kernel' \
        --launch-skip 3 --launch-count 3 --section SpeedOfLight --section WarpStateStats \
        python scripts/profile_attention_step.py --seq 8192 --batch-heads 4x16

Why: the benchmark times whole kernels; where a kernel's time goes (tensor pipe, L2, warp stalls)
needs the hardware counters, and a profiler replays every kernel it profiles many times, so this
runs the step a fixed number of times (--steps, the first one compiles) instead of a timing loop.
"""
from __future__ import annotations

import argparse

import torch
from launch_configs import launch_overrides, load_launch  # scripts/ is this script's first sys.path entry


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--batch-heads", default="4x16", help="B x H, e.g. 4x16")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--spec", default="fp8")
    parser.add_argument("--steps", type=int, default=2, help="forward + backward passes (the first compiles)")
    parser.add_argument("--launch", type=load_launch, default=None,
                        help="a launch file ({\"fwd\": {...}, \"bwd\": {...}}) on top of the kernels' defaults")
    args = parser.parse_args(argv)
    try:
        batch, heads = (int(x) for x in args.batch_heads.lower().split("x"))
    except ValueError:
        parser.error(f"--batch-heads {args.batch_heads!r}: expected BxH, e.g. 4x16")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (a profiler reads its counters)")
    from flamia_kernels import flamia_attention

    gen = torch.Generator(device="cuda").manual_seed(0)
    shape = (batch, heads, args.seq, args.dim)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)
    with launch_overrides(args.launch):
        for _ in range(args.steps):
            out = flamia_attention(q, k, v, spec=args.spec, causal=True)
            out.backward(do)
            q.grad = k.grad = v.grad = None
    torch.cuda.synchronize()
    print(f"ran {args.steps} x fwd+bwd, spec {args.spec}, shape {shape}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
