"""flamia_kernels: FLAMIA attention (flash attention on FP8 / MXFP8 / NVFP4 operands, causally safe).

    from flamia_kernels import flamia_attention, AttentionSpec, SEQ_BLOCK, SUPPORTED_HEAD_DIMS
    o = flamia_attention(q, k, v, spec="fp8", causal=True)

On a CPU, set TRITON_INTERPRET=1 *before* importing this package to run the Triton
kernels in Triton's interpreter; otherwise quantized specs run `reference.attention`.
See docs/kernels.md.
"""
from .attention import flamia_attention
from .spec import PRESETS, SEQ_BLOCK, SUPPORTED_HEAD_DIMS, AttentionSpec

__all__ = ["flamia_attention", "AttentionSpec", "PRESETS", "SEQ_BLOCK", "SUPPORTED_HEAD_DIMS"]
