"""The key-side pass's flagged form (`quantize.quantize_fp8_key_sides(flags=...)`, `key_flags`), under the
interpreter: the plain pass's bytes and scales from a persistent grid, each slice counted once per item, and the
host-side guards. The forward that waits on the counters is sm_90 Gluon only: tests/test_attention_gpu.py."""
from __future__ import annotations

import pytest
import torch
from flamia_kernels import quantize
from flamia_kernels.key_flags import KeyFlags

pytestmark = pytest.mark.skipif(not quantize.HAS_TRITON, reason="needs Triton (the interpreter on the CPU)")


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t.view(torch.int32)


@pytest.mark.parametrize("programs", [1, 4])
def test_flagged_pass_writes_the_plain_pass_bytes_and_counts_each_item(programs):
    torch.manual_seed(3)
    k = (torch.randn(2, 3, 384, 128) * 4).to(torch.bfloat16)
    v = torch.randn(2, 3, 384, 128).to(torch.bfloat16)
    # a NaN, ±Inf and an all-zero row: the branches of the conversion, and a token block that is not finite
    k[0, 1, 5, 7], k[1, 2, 300, 0], v[1, 2, 200, 3], v[0, 0, 130] = float("inf"), float("-inf"), float("nan"), 0.0
    want = quantize.quantize_fp8_key_sides(k, v, 128)
    flags = KeyFlags(torch.zeros(7, dtype=torch.int32), 6, programs)
    got = quantize.quantize_fp8_key_sides(k, v, 128, flags=flags)
    for part_got, part_want in zip(got, want, strict=True):
        for a, b in zip(part_got, part_want, strict=True):
            assert a.shape == b.shape and torch.equal(_bits(a), _bits(b))
    assert flags.published
    assert flags.counts.tolist() == [6] * 6 + [0]  # K's and V's 3 blocks per slice, the done counter untouched


def test_flagged_pass_catches_a_changed_byte():
    """The comparison above can fail: the flagged pass run on a V with one element changed differs in V's bytes."""
    torch.manual_seed(4)
    k, v = (torch.randn(1, 2, 256, 128).to(torch.bfloat16) for _ in range(2))
    want = quantize.quantize_fp8_key_sides(k, v, 128)
    v2 = v.clone()
    v2[0, 1, 17, 9] += 8
    got = quantize.quantize_fp8_key_sides(k, v2, 128, flags=KeyFlags(torch.zeros(3, dtype=torch.int32), 2, 2))
    assert torch.equal(_bits(got[0][0]), _bits(want[0][0]))
    assert not torch.equal(_bits(got[1][0]), _bits(want[1][0]))


def test_flags_for_other_slices_are_refused():
    k = v = torch.randn(1, 2, 128, 128).to(torch.bfloat16)
    with pytest.raises(ValueError, match="flags for 3 slices"):
        quantize.quantize_fp8_key_sides(k, v, 128, flags=KeyFlags(torch.zeros(4, dtype=torch.int32), 3, 2))


def test_abandon_zeroes_published_counters():
    flags = KeyFlags(torch.tensor([4, 4, 0], dtype=torch.int32), 2, 1)
    flags.abandon()  # not published: a caller's buffer is left alone
    assert flags.counts.tolist() == [4, 4, 0]
    flags.published = True
    flags.abandon()
    assert flags.counts.tolist() == [0, 0, 0] and not flags.published
