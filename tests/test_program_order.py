"""The causal kernels' program order (`flamia_kernels.program_order`): longest first by groups of heads.

The order changes which program runs when, never what a program computes: every (block, head) gets
exactly one program, and the kernels' outputs are the same bits under any grouping.
"""
import pytest
import torch
from attention_saved import backward_args
from flamia_kernels import AttentionSpec, attention_bwd, attention_fwd
from flamia_kernels import quantize as QZ
from flamia_kernels._triton_env import HAS_TRITON, INTERPRET
from flamia_kernels.attention_operands import prepare_forward
from flamia_kernels.program_order import L2_SHARE, heads_per_group, order_reference

needs_interpreter = pytest.mark.skipif(not (HAS_TRITON and INTERPRET),
                                       reason="runs the Triton kernels under TRITON_INTERPRET=1")


def test_heads_per_group_fits_the_l2_share_in_powers_of_two():
    mb = 1 << 20
    assert L2_SHARE == 32 * mb
    assert heads_per_group(64, 4 * mb) == 8  # the forward at S = 8k, D = 128: 4·S·D bytes per head
    assert heads_per_group(32, 8 * mb) == 4 and heads_per_group(16, 16 * mb) == 2
    assert heads_per_group(16, 64 * mb) == 1  # a head larger than the share still gets a group
    assert heads_per_group(6, 1) == 4  # a power of two, at most the heads there are
    assert heads_per_group(1, 1) == 1
    for bad in ((0, 1), (4, 0)):
        with pytest.raises(ValueError, match="must be >= 1"):
            heads_per_group(*bad)


@pytest.mark.parametrize("n_blocks,n_heads,group", [(4, 8, 2), (5, 6, 4), (3, 7, 8), (6, 1, 1), (2, 5, 1)])
def test_order_covers_every_block_once_longest_first_in_each_group(n_blocks, n_heads, group):
    seen = [order_reference(pid, n_blocks, n_heads, group) for pid in range(n_blocks * n_heads)]
    assert sorted(seen) == [(r, h) for r in range(n_blocks) for h in range(n_heads)]
    for g in range(0, n_heads, group):  # a group's programs are consecutive, ranks non-decreasing
        ranks = [r for r, h in seen if g <= h < g + group]
        assert ranks == sorted(ranks) and len(ranks) == n_blocks * min(group, n_heads - g)
    if group == 1:  # head after head, each longest first: the order before the groups
        assert seen == [(r, h) for h in range(n_heads) for r in range(n_blocks)]


if HAS_TRITON:
    import triton
    import triton.language as tl
    from flamia_kernels.program_order import order

    @triton.jit
    def _order_kernel(OUT, n_blocks, n_heads, group):
        pid = tl.program_id(0)
        rank, head = order(pid, n_blocks, n_heads, group)
        tl.store(OUT + 2 * pid, rank)
        tl.store(OUT + 2 * pid + 1, head)


@needs_interpreter
@pytest.mark.parametrize("n_blocks,n_heads,group", [(5, 6, 4), (3, 8, 8), (4, 3, 1)])
def test_the_triton_order_is_the_reference(n_blocks, n_heads, group):
    out = torch.full((n_blocks * n_heads, 2), -1, dtype=torch.int32)
    _order_kernel[(n_blocks * n_heads,)](out, n_blocks, n_heads, group)
    assert out.tolist() == [list(order_reference(p, n_blocks, n_heads, group)) for p in range(n_blocks * n_heads)]


def _inputs(b, hq, hkv, s, d, seed):
    gen = torch.Generator().manual_seed(seed)
    mk = lambda h: torch.randn(b, h, s, d, generator=gen).to(torch.bfloat16)  # noqa: E731
    return mk(hq), mk(hkv), mk(hkv), mk(hq)


@needs_interpreter
@pytest.mark.parametrize("causal", [True, False])
def test_kernel_outputs_do_not_depend_on_the_head_groups(causal):
    """Forward, dK/dV and dQ at B×Hq = 6, B×Hkv = 3 (GQA) with groups of 1 (head after head), 2 and 4 heads
    (a partial last group): the same bits."""
    spec = AttentionSpec.parse("fp8")
    q, k, v, do = _inputs(1, 6, 3, 256, 64, seed=43)
    ops = prepare_forward(q, k, v, spec, True, QZ, 128, v_transposed=True)
    launch = {"num_warps": 4, "num_stages": 1}
    fwd = [attention_fwd.forward(ops.q, ops.k, ops.v, spec, causal, True, 0.125, 128, True,
                                 config={**launch, "head_group": g}) for g in (1, 2, 4)]
    args = backward_args(spec, q, k, v, do, causal=causal)
    bwd = [attention_bwd.backward(*args, config={**launch, "head_group": g, "dq_head_group": g}) for g in (1, 2, 4)]
    for runs in (fwd, bwd):
        for other in runs[1:]:
            assert all(torch.equal(a, b) for a, b in zip(other, runs[0], strict=True))
