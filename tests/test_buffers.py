"""`buffers.carve`: several outputs from one allocation must behave as separate tensors."""
import torch
from flamia_kernels.buffers import ALIGN, carve


def test_carved_parts_have_their_shapes_and_are_aligned_and_disjoint():
    parts = [((2, 3, 5), torch.float8_e4m3fn), ((2, 3), torch.float32), ((7,), torch.int8), ((3, 1), torch.bfloat16)]
    out = carve(torch.device("cpu"), parts)
    base = out[0].data_ptr()
    spans = []
    for t, (shape, dtype) in zip(out, parts, strict=True):
        assert t.shape == shape and t.dtype == dtype and t.is_contiguous()
        assert (t.data_ptr() - base) % ALIGN == 0
        spans.append((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()))
    spans.sort()
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:], strict=False))
    # writing each part leaves the others as they were
    gen = torch.Generator().manual_seed(0)
    values = [torch.randn(t.shape, generator=gen).to(t.dtype) if t.dtype != torch.int8
              else torch.randint(-100, 100, t.shape, generator=gen, dtype=torch.int8) for t in out]
    for t, v in zip(out, values, strict=True):
        t.copy_(v)
    for t, v in zip(out, values, strict=True):
        assert torch.equal(t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t,
                           v.view(torch.uint8) if v.dtype == torch.float8_e4m3fn else v)


def test_empty_parts_are_allowed():
    a, b = carve(torch.device("cpu"), [((0, 4), torch.float32), ((2,), torch.float32)])
    assert a.shape == (0, 4) and b.shape == (2,)
