"""Document masking: attention that does not cross document boundaries inside a packed row.

    row:      [d3 tail ... EOS][d4 ...... EOS][d5 ...]
    doc_ids:   0 0 0 0 0 0  0   1 1 1 1 1  1   2 2 2          (PackedLoader.next_batch(doc_ids=True))
    mask:     query i sees key j  iff  j <= i  and  doc_ids[i] == doc_ids[j]   (block-diagonal causal)
    varlen:   cu_seqlens = [0, 7, 13, 16] per row, the form varlen flash kernels take

Where it runs: every attention layer hands the doc ids to `flamia_kernels.flamia_attention(...,
doc_ids=)`, for every spec. Quantized specs run the FLAMIA kernels, which AND "same document"
into their causal mask tile by tile and skip tiles wholly in other documents; the bf16 spec
runs SDPA with the dense boolean mask `document_causal_mask` (S² bytes per row, 1 GiB at 32k:
a correctness path, not a fast one). The mask builder lives in `flamia_kernels.document` (the
kernels do not import this package) and is re-exported here. A mask keeps the causal-safety
rule: it only removes keys j <= i, never adds a later one (docs/kernels.md).
"""
from __future__ import annotations

import torch
from flamia_kernels.document import document_causal_mask

__all__ = ["cu_seqlens", "document_causal_mask", "document_ids_from_starts"]


def document_ids_from_starts(starts: torch.Tensor) -> torch.Tensor:
    """starts (B, S) bool/int, 1 where a document's first token sits -> doc ids (B, S) int64 from 0."""
    return torch.cumsum(starts.to(torch.int64), dim=-1) - starts[..., :1].to(torch.int64)


def cu_seqlens(doc_ids: torch.Tensor) -> list[torch.Tensor]:
    """Per row, int32 cumulative document lengths [0, len0, len0+len1, ..., S] (varlen kernel form)."""
    out = []
    for row in doc_ids:
        change = torch.nonzero(row[1:] != row[:-1]).flatten() + 1
        ends = torch.cat([change, torch.tensor([row.numel()], device=row.device)])
        out.append(torch.cat([torch.zeros(1, dtype=torch.int64, device=row.device), ends]).to(torch.int32))
    return out
