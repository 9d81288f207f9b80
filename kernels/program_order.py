"""The order in which the causal attention kernels' programs start: longest first, over groups of heads.

A causal kernel's programs differ in length: the forward's and dQ's program for the last query rows
reads every key tile, the one for the first rows one tile; dK/dV the other way round. The GPU starts
programs in the order of their linear index. With one head after the other (each head's programs
longest first), the last head's longest program starts when little else is left to run, and the SMs
wait for it: a list-scheduling count with 396 program slots (132 SMs × 3) puts the makespan at 1.050×
the work divided by the slots at S = 8k, B×H = 64 (1.038× at 16k, 1.020× at 32k). All heads' longest
programs first would end the kernel on one-tile programs (1.001×), but then every head's K and V stream
through L2 at once. So the heads go in groups whose operands fit a share of L2 (`heads_per_group`),
each group longest first: 1.009× at 8k, 16k and 32k with groups of 8, 4 and 2 heads.

`order` (Triton) and `gluon_order` (Gluon) map a program's linear index to (rank, head); rank 0 is the
longest program of its head (the caller turns it into its row or key block). `order_reference` is the
same map in Python, what the tests hold the kernels' versions to.
"""
from __future__ import annotations

from ._triton_env import HAS_GLUON, HAS_TRITON

L2_SHARE = 32 << 20  # bytes of operands a group of heads may keep in flight (the H200's L2: 50 MB)


def heads_per_group(n_heads: int, bytes_per_head: int, share: int = L2_SHARE) -> int:
    """The largest power of two of heads whose operands (bytes_per_head each) fit `share`, at least 1 and
    at most n_heads. A power of two: B×H is usually one, and a group that does not divide it leaves a
    small last group whose longest programs start late again (1.03× instead of 1.009× at 8k)."""
    if n_heads < 1 or bytes_per_head < 1:
        raise ValueError(f"heads_per_group: n_heads={n_heads} and bytes_per_head={bytes_per_head} must be >= 1")
    group = 1
    while group * 2 <= n_heads and group * 2 * bytes_per_head <= share:
        group *= 2
    return group


def order_reference(pid: int, n_blocks: int, n_heads: int, group: int) -> tuple[int, int]:
    """(rank, head) of program `pid` of n_blocks × n_heads: groups of `group` heads one after the other
    (the last one may be smaller), inside a group rank 0 of every head, then rank 1, ..."""
    span = n_blocks * group
    first = pid // span * group
    heads = min(group, n_heads - first)
    r = pid - pid // span * span
    return r // heads, first + r % heads


if HAS_TRITON:
    import triton
    import triton.language as tl

    @triton.jit
    def order(pid, n_blocks, n_heads, group):
        """`order_reference` in Triton."""
        span = n_blocks * group
        first = pid // span * group
        heads = tl.minimum(group, n_heads - first)
        r = pid - pid // span * span
        return r // heads, first + r % heads


if HAS_GLUON:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    @gluon.jit
    def gluon_order(pid, n_blocks, n_heads, group):
        """`order_reference` in Gluon."""
        span = n_blocks * group
        first = pid // span * group
        heads = gl.minimum(group, n_heads - first)
        r = pid - pid // span * span
        return r // heads, first + r % heads
