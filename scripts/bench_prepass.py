"""Speed of the FLAMIA forward pre-pass on CUDA, part by part, with launch variants.

    python scripts/bench_prepass.py                          # S = 8k, B×H = 4×16, D = 128
    python scripts/bench_prepass.py --seq 16384 --batch 2

The fp8 forward quantizes Q per token (`quantize.quantize_fp8_per_token`) and K and V per token
plus their off-diagonal token-block copies in one pass each (`quantize.quantize_fp8_key_side`, V
laid out as Vᵀ). At S = 8k, B×H = 64, D = 128 the three took 0.63 ms against a 1.95 ms forward
kernel (docs/benchmarks.md), while their bytes (bf16 in, fp8 out, twice for K and V) move in
~0.16 ms at the H200's bandwidth: the passes are bound by their instructions (per element of K and
V: two divisions by a shared scale, each one FMUL and two FFMAs after one IEEE division per token
or block, `quantize._div_by_shared`; two hardware E4M3 conversions and one decode, with the NaN fix
only on tiles holding a NaN or ±Inf; for Vᵀ the bytes' transposition through shared memory), which
more warps per tile spread over more threads. That was so until session 21: with the head dim a constexpr (vector
loads and stores, SASS −40 to −66%) the times stayed (0.152 ms for K and Vᵀ in one launch at 8k), so the passes are
now bound by DRAM at ~3.5 TB/s. Each row: median ms (triton.testing.do_bench), the
bytes it moves over that time, and whether its outputs are bit-identical to the default launch's
(the GPU tier of tests/test_quantize.py holds the default against `formats`). Never imported by the package.
"""
from __future__ import annotations

import argparse

import torch
from flamia_kernels import quantize as QZ


def _ms(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.uint8) if x.dtype == torch.float8_e4m3fn else x


def _same(a, b) -> bool:
    return all(torch.equal(_bits(x), _bits(y)) for x, y in zip(a, b, strict=True))


# (part, launch override or None for the default, the call); bytes: bf16 read + fp8 (and copies) written
VARIANTS = {
    "q per token": [None, {"rows": 64, "num_warps": 8}, {"rows": 128, "num_warps": 4}, {"rows": 128, "num_warps": 8},
                    {"rows": 128, "num_warps": 16}, {"rows": 256, "num_warps": 8}],
    # the key side's default is 16 warps since session 6 (8 before: 0.263 / 0.283 ms at 8k)
    "k key side": [None, {"num_warps": 8}, {"num_warps": 32}],
    "v key side (Vᵀ)": [None, {"num_warps": 8}, {"num_warps": 32}],
    "k and v key sides, one launch": [None, {"num_warps": 4}, {"num_warps": 16}],
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, default=8192)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--block", type=int, default=128, help="the forward's token tile (SEQ_BLOCK)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_prepass: needs a CUDA GPU (the CPU runs the kernels under the interpreter)")
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(args.batch, args.heads, args.seq, args.dim, device="cuda", generator=gen).to(torch.bfloat16)
    # V apart from K: with one tensor for both, the one-launch pass read each block once from DRAM and once from L2
    # (session 36: 0.171 ms against the forward's ~0.196 at 8k on an H100)
    v = torch.randn(x.shape, device="cuda", generator=gen).to(torch.bfloat16)
    n = x.numel()
    calls = {
        "q per token": (lambda launch: QZ.quantize_fp8_per_token(x, launch=launch), 2 * n + n + 4 * n // args.dim),
        "k key side": (lambda launch: QZ.quantize_fp8_key_side(x, args.block, launch=launch), 2 * n + 2 * n),
        "v key side (Vᵀ)": (lambda launch: QZ.quantize_fp8_key_side(x, args.block, True, launch=launch), 2 * n + 2 * n),
        "k and v key sides, one launch": (
            lambda launch: [t for part in QZ.quantize_fp8_key_sides(x, v, args.block, launch=launch, p_order=True)
                            for t in part],  # V's copy in P's order, as the sm_90 forward reads it
            2 * (2 * n + 2 * n)),
    }
    print(f"pre-pass parts, B×H = {args.batch}×{args.heads}, S = {args.seq}, D = {args.dim}, "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| part | launch | ms | GB/s | bit-identical to default |\n| --- | --- | --- | --- | --- |")
    for part, launches in VARIANTS.items():
        call, nbytes = calls[part]
        ref = call(None)
        for launch in launches:
            ms = _ms(lambda call=call, launch=launch: call(launch))
            same = "—" if launch is None else ("yes" if _same(call(launch), ref) else "**NO**")
            label = "default" if launch is None else ", ".join(f"{k}={v}" for k, v in launch.items())
            print(f"| {part} | {label} | {ms:.4f} | {nbytes / ms / 1e6:,.0f} | {same} |", flush=True)


if __name__ == "__main__":
    main()
