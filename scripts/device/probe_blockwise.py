"""Which scale layouts make torch._scaled_mm's blockwise (1x128 / 128x128) product right on this GPU.

fp8-block training stalled at loss 7.5 on the H200 (2026-11-30) while every GEMM ran without error:
cuBLAS read our scale tensors another way. For each GEMM role's operand kinds, try the plausible
shape/stride arrangements of both scales and print the relative L2 error against the exact
(dequantized fp32) product. Never imported by the package.
    python scripts/device/probe_blockwise.py
"""
import itertools

import torch
from flamia_kernels.linear_quant import FP8_1x128, FP8_128x128, quantize_operand

M, N, K = 512, 384, 640  # distinct multiples of 128, so a transposed reading cannot pass by symmetry


def arrangements(s: torch.Tensor) -> dict:
    """Both logical orientations of a 2-D scale tensor, each row- and column-major."""
    out = {}
    for name, t in (("as-is", s), ("T", s.t())):
        out[f"{name}/row-major"] = t.contiguous()
        out[f"{name}/col-major"] = t.t().contiguous().t()
    return out


torch.manual_seed(0)
for kind_b in (FP8_128x128, FP8_1x128):
    a_src = torch.randn(M, K, device="cuda") * torch.rand(M, 1, device="cuda") * 4
    b_src = torch.randn(N, K, device="cuda") * torch.rand(N, 1, device="cuda") * 4
    a = quantize_operand(a_src, FP8_1x128, 128)
    b = quantize_operand(b_src, kind_b, 128)
    exact = a.dense() @ b.dense().t()
    print(f"A 1x128 scale {tuple(a.scale.shape)}, B {kind_b.rows}x{kind_b.cols} scale {tuple(b.scale.shape)}")
    for (na, sa), (nb, sb) in itertools.product(arrangements(a.scale).items(), arrangements(b.scale).items()):
        try:
            out = torch._scaled_mm(a.data.contiguous(), b.data.contiguous().t(), sa, sb, out_dtype=torch.bfloat16)
            err = f"{((out.float() - exact).norm() / exact.norm()).item():.3e}"
        except Exception as e:  # noqa: BLE001 - a probe: every refusal is a finding
            err = f"refused: {str(e).strip().splitlines()[0][:90]}"
        print(f"  a {na:16s} {tuple(sa.shape)} {sa.stride()}  b {nb:16s} {tuple(sb.shape)} {sb.stride()}  {err}")
