"""Document masking: attention that does not cross document boundaries inside a packed row.

    row:      [d3 tail ... EOS][d4 ...... EOS][d5 ...]
    doc_ids:   0 0 0 0 0 0  0   1 1 1 1 1  1   2 2 2          (PackedLoader.next_batch(doc_ids=True))
    mask:     query i sees key j  iff  j <= i  and  doc_ids[i] == doc_ids[j]   (block-diagonal causal)
    varlen:   cu_seqlens = [0, 7, 13, 16] per row, the form varlen flash kernels take

Where it runs today: the bf16 attention spec, through torch SDPA with an explicit boolean
mask (B, 1, S, S). That mask costs S² bytes per row (1 GiB per row at 32k) and SDPA with
a dense mask is slower than its causal path, so it is a correctness path, not a fast one.
The FLAMIA kernels (quantized specs) do not take a mask yet: `validate` refuses
`train.document_masking=true` with a quantized spec, and `document_attention` raises
too. The hook for the kernels is `document_attention`: once `flamia_attention` accepts
`cu_seqlens` (or doc ids), route quantized specs there; `cu_seqlens` below gives the
boundaries in that form. A mask keeps the causal-safety rule trivially: it only removes
keys j <= i, never adds a later one.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from flamia_train.errors import ConfigError

NOT_SUPPORTED = "not yet supported by the FLAMIA kernels for quantized specs; use the bf16 attention spec"


def is_bf16_spec(spec) -> bool:
    """True when `spec` (a string or AttentionSpec) is the plain bf16 attention path."""
    from flamia_kernels import AttentionSpec

    return AttentionSpec.parse(spec).is_bf16


def document_ids_from_starts(starts: torch.Tensor) -> torch.Tensor:
    """starts (B, S) bool/int, 1 where a document's first token sits -> doc ids (B, S) int64 from 0."""
    return torch.cumsum(starts.to(torch.int64), dim=-1) - starts[..., :1].to(torch.int64)


def document_causal_mask(doc_ids: torch.Tensor) -> torch.Tensor:
    """doc_ids (B, S) -> bool (B, 1, S, S), True where query i may attend key j (same doc, j <= i)."""
    S = doc_ids.shape[-1]
    causal = torch.ones(S, S, dtype=torch.bool, device=doc_ids.device).tril()
    same = doc_ids[:, :, None] == doc_ids[:, None, :]  # (B, S, S)
    return (same & causal)[:, None]


def cu_seqlens(doc_ids: torch.Tensor) -> list[torch.Tensor]:
    """Per row, int32 cumulative document lengths [0, len0, len0+len1, ..., S] (varlen kernel form)."""
    out = []
    for row in doc_ids:
        change = torch.nonzero(row[1:] != row[:-1]).flatten() + 1
        ends = torch.cat([change, torch.tensor([row.numel()], device=row.device)])
        out.append(torch.cat([torch.zeros(1, dtype=torch.int64, device=row.device), ends]).to(torch.int32))
    return out


def document_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, spec) -> torch.Tensor:
    """Masked attention. q (B, H, S, Dh), k/v (B, Hkv, S, Dh), mask (B, 1, S, S) bool -> (B, H, S, Dh).

    bf16 spec only (module docstring); the kernel hook for quantized specs goes here.
    """
    if not is_bf16_spec(spec):
        name = getattr(spec, "name", spec)
        raise ConfigError("train.document_masking", True, f"{NOT_SUPPORTED} (this layer uses '{name}')")
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        # Explicit GQA expansion: SDPA's enable_gqa is not taken by every backend that accepts a mask.
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
