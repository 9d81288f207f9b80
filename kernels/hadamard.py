"""Random Hadamard transform (RHT) in 16×16 blocks, as NVIDIA's NVFP4 pretraining recipe uses on wgrad.

The weight gradient ``dW = dYᵀ·X`` contracts over tokens, where gradients carry
outliers that a 16-element FP4 block cannot hold. Rotating both operands along the
token dim by the same orthogonal matrix spreads an outlier over its block and leaves
the exact product unchanged:

    (dYᵀ·R)·(Xᵀ·R)ᵀ = dYᵀ·R·Rᵀ·X = dYᵀ·X      for R = blockdiag(M, ..., M), M·Mᵀ = I

with ``M = diag(s)·H₁₆ / 4``: H₁₆ the Sylvester Hadamard matrix (entries ±1, H·Hᵀ = 16·I)
and s a random ±1 vector. The signs come from a seed, so a step is reproducible and
a resume replays the same transform; the caller derives the seed per step and layer
(:func:`mix_seed`).
"""
from __future__ import annotations

import torch

RHT_BLOCK = 16
_MASK64 = (1 << 64) - 1


def mix_seed(*parts: int) -> int:
    """A 63-bit seed from integer parts (splitmix64 over each), stable across runs and Python versions."""
    h = 0x9E3779B97F4A7C15
    for p in parts:
        h = (h ^ (int(p) & _MASK64)) & _MASK64
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
        h ^= h >> 31
    return h & ((1 << 63) - 1)


def hadamard_matrix(n: int = RHT_BLOCK) -> torch.Tensor:
    """Sylvester Hadamard matrix [n, n] fp32 with ±1 entries (n a power of two)."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"hadamard: size {n} must be a power of two")
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    return h


def random_signs(seed: int, n: int = RHT_BLOCK) -> torch.Tensor:
    """[n] fp32 ±1 drawn from `seed` (on the CPU generator, so every device gets the same signs)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2, (n,), generator=gen).float() * 2 - 1


def rht_matrix(seed: int, n: int = RHT_BLOCK, device=None) -> torch.Tensor:
    """Orthogonal [n, n] fp32 ``diag(s)·H / sqrt(n)`` for the signs of `seed`."""
    m = random_signs(seed, n).unsqueeze(1) * hadamard_matrix(n) / n**0.5
    return m.to(device)


def random_hadamard_transform(x: torch.Tensor, seed: int, block: int = RHT_BLOCK) -> torch.Tensor:
    """``x`` [..., K] rotated along its last dim, block by block: ``x_blk · M`` (fp32 out).

    K must be a multiple of `block` (pad with zeros first: the padded product is unchanged).
    Two operands transformed with the same seed keep their contraction ``a·bᵀ`` exact.
    """
    if x.shape[-1] % block:
        raise ValueError(f"hadamard: last dim {x.shape[-1]} is not a multiple of the block {block}")
    m = rht_matrix(seed, block, x.device)
    xb = x.float().reshape(*x.shape[:-1], x.shape[-1] // block, block)  # (..., K/16, 16)
    return (xb @ m).reshape(x.shape)
