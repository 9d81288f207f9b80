"""Document masking for FLAMIA attention: packed rows whose attention stays inside each document.

    row:      [d3 tail ... EOS][d4 ...... EOS][d5 ...]
    doc_ids:   0 0 0 0 0 0  0   1 1 1 1 1  1   2 2 2       [B, S] int32/int64, non-decreasing per row
    mask:     query i sees key j  iff  j <= i  and  doc_ids[i] == doc_ids[j]   (block-diagonal causal)
    start:     0 0 0 0 0 0  0   7 7 7 7 7  7  13 13 13     first index of each token's document
    end:       7 7 7 7 7 7  7  13 ...        13  16 16 16  one past its last index

The kernels read `doc_tables`: a dense int32 document index (so any int64 ids compare
correctly in int32) and the start / end columns, which let a program skip whole key (or
query) tiles that lie in other documents. The bf16 spec and the reference take the dense
boolean mask `document_causal_mask` (S² bytes per row: a correctness path).

A mask only removes keys j <= i (never adds a later one), so it keeps the causal-safety rule.
"""
from __future__ import annotations

import torch

ID_DTYPES = (torch.int32, torch.int64)


def check_doc_ids(doc_ids, q: torch.Tensor) -> None:
    """Raise TypeError / ValueError unless doc_ids is an int32/int64 [B, S] tensor on q's device whose
    rows never decrease (q is [B, H, S, D]). The monotonicity check reads one bool back (a sync)."""
    if not isinstance(doc_ids, torch.Tensor):
        raise TypeError(f"flamia_attention: doc_ids must be a torch.Tensor or None, got {type(doc_ids).__name__}")
    if doc_ids.dtype not in ID_DTYPES:
        raise TypeError(f"flamia_attention: doc_ids.dtype = {doc_ids.dtype} is not supported; allowed: "
                        f"{', '.join(map(str, ID_DTYPES))}")
    want = (q.shape[0], q.shape[2])
    if tuple(doc_ids.shape) != want:
        raise ValueError(f"flamia_attention: doc_ids shape {tuple(doc_ids.shape)} must be [B, S] = {list(want)}")
    if doc_ids.device != q.device:
        raise ValueError(f"flamia_attention: doc_ids is on {doc_ids.device} but q is on {q.device}")
    down = doc_ids[:, 1:] < doc_ids[:, :-1]
    if bool(down.any()):
        b, i = (int(x) for x in torch.nonzero(down)[0])
        raise ValueError(f"flamia_attention: doc_ids must be non-decreasing along each row; row {b} drops from "
                         f"{int(doc_ids[b, i])} to {int(doc_ids[b, i + 1])} at position {i + 1}")


def document_causal_mask(doc_ids: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """doc_ids [B, S] -> bool [B, 1, S, S], True where query i may attend key j (same document, and
    j <= i when causal)."""
    seq = doc_ids.shape[-1]
    keep = doc_ids[:, :, None] == doc_ids[:, None, :]  # (B, S, S)
    if causal:
        keep = keep & torch.ones(seq, seq, dtype=torch.bool, device=doc_ids.device).tril()
    return keep[:, None]


def doc_tables(doc_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dense index, start, end), each int32 [B, S] contiguous (module docstring); no host sync."""
    b, seq = doc_ids.shape
    pos = torch.arange(seq, device=doc_ids.device).expand(b, seq)
    new = torch.ones(b, seq, dtype=torch.bool, device=doc_ids.device)
    new[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]  # a document's first token
    last = torch.ones_like(new)
    last[:, :-1] = new[:, 1:]  # a document's last token
    index = torch.cumsum(new.to(torch.int32), dim=1, dtype=torch.int32) - 1
    start = torch.cummax(torch.where(new, pos, 0), dim=1).values
    end = torch.cummin(torch.where(last, pos + 1, seq).flip(1), dim=1).values.flip(1)
    return index.contiguous(), start.to(torch.int32).contiguous(), end.to(torch.int32).contiguous()
