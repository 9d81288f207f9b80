"""The GPT/Llama decoder: token embedding, N pre-norm blocks, final norm, LM head.

Each block is RMSNorm → attention (GQA, RoPE, optional per-head QK-norm) →
residual, RMSNorm → SwiGLU MLP → residual. Every attention layer calls
`flamia_kernels.flamia_attention` with its own spec, so a precision recipe
chooses the operand formats layer by layer; every linear (wq, wk, wv, wo, w_gate,
w_up, w_down and the LM head) is a `flamia_kernels.linear.FlamiaLinear` whose three
GEMMs run in the formats `set_linear_specs` gives it. The model holds no distributed
code: sharding, activation checkpointing and compile are applied from the
outside by `flamia_train.parallel`.

Shapes: B batch, S sequence, D_model width, H query heads, Hkv key/value
heads, Dh head dim, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F
from flamia_kernels.linear import FlamiaLinear

from flamia_train.errors import ConfigError
from flamia_train.rope import RopeScaling, rope_table


@dataclass
class ModelConfig:
    """The shape of the network; named presets live in MODEL_SHAPES and configs/model/."""

    name: str = "tiny"  # registry name, used in logs and checkpoint metadata
    vocab_size: int = 8192  # rows of the embedding table and columns of the LM head
    d_model: int = 256  # residual-stream width
    n_layers: int = 4  # number of transformer blocks
    n_heads: int = 4  # query heads; head_dim = d_model // n_heads
    n_kv_heads: int = 4  # key/value heads (GQA when < n_heads); must divide n_heads
    ffn_hidden: int = 0  # SwiGLU hidden width; 0 = round_up(8/3 * d_model, ffn_multiple_of)
    ffn_multiple_of: int = 64  # rounding unit for the derived ffn_hidden
    rope_theta: float = 10000.0  # RoPE base; the run may change it later (context extension)
    qk_norm: bool = False  # RMSNorm over head_dim on q and k before RoPE
    tie_embeddings: bool = True  # LM head shares the embedding matrix
    norm_eps: float = 1e-5  # epsilon inside every RMSNorm
    init_std: float = 0.02  # std of the normal init (see GPT.init_weights)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ffn_dim(self) -> int:
        """ffn_hidden, or the Llama rule 8/3·d_model rounded up to ffn_multiple_of."""
        if self.ffn_hidden > 0:
            return self.ffn_hidden
        m = self.ffn_multiple_of
        return m * math.ceil(int(8 * self.d_model / 3) / m)


MODEL_SHAPES: dict[str, ModelConfig] = {
    # CPU-sized: trains in seconds, used by tests and CI.
    "tiny": ModelConfig(),
    "gpt-125m": ModelConfig(name="gpt-125m", vocab_size=32768, d_model=768, n_layers=12, n_heads=12,
                            n_kv_heads=12),
    "gpt-350m": ModelConfig(name="gpt-350m", vocab_size=32768, d_model=1024, n_layers=24, n_heads=16,
                            n_kv_heads=16),
    # head_dim 128 (FLAMIA's fast D=128 path); GQA 2:1 halves the KV projections, 20 layers
    # bring the total to ~1.0B parameters with the 32k vocabulary.
    "gpt-1b": ModelConfig(name="gpt-1b", vocab_size=32768, d_model=2048, n_layers=20, n_heads=16,
                          n_kv_heads=8),
    "llama3-8b": ModelConfig(name="llama3-8b", vocab_size=128256, d_model=4096, n_layers=32, n_heads=32,
                             n_kv_heads=8, ffn_hidden=14336, ffn_multiple_of=1024, rope_theta=500000.0,
                             tie_embeddings=False),
}


def validate_model_config(cfg: ModelConfig) -> None:
    """Raise ConfigError (key `model.<field>`) for a shape the model cannot build."""
    for key in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "ffn_multiple_of"):
        if getattr(cfg, key) <= 0:
            raise ConfigError(f"model.{key}", getattr(cfg, key), "must be a positive integer")
    if cfg.ffn_hidden < 0:
        raise ConfigError("model.ffn_hidden", cfg.ffn_hidden, "must be >= 0 (0 derives it from d_model)")
    if cfg.d_model % cfg.n_heads:
        raise ConfigError("model.n_heads", cfg.n_heads, f"must divide model.d_model = {cfg.d_model}")
    if cfg.n_heads % cfg.n_kv_heads:
        raise ConfigError("model.n_kv_heads", cfg.n_kv_heads, f"must divide model.n_heads = {cfg.n_heads}")
    if cfg.head_dim % 2:
        raise ConfigError("model.n_heads", cfg.n_heads, "head_dim = d_model / n_heads must be even (RoPE)")
    for key in ("rope_theta", "norm_eps", "init_std"):
        if getattr(cfg, key) <= 0:
            raise ConfigError(f"model.{key}", getattr(cfg, key), "must be > 0")


class RMSNorm(nn.Module):
    """x / rms(x) * weight over the last dim; the statistic in fp32 whatever the input dtype."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # bf16 squares lose too many bits for the mean; normalise in fp32, scale in x's dtype.
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_frequencies(seq_len: int, head_dim: int, theta: float, device: torch.device,
                     scaling: RopeScaling | None = None) -> torch.Tensor:
    """Rotations e^{i·pos·θ^(-2j/Dh)} as complex64 (S, Dh/2), Llama's interleaved-pair convention.

    `scaling` rescales them for context extension (linear / NTK / YaRN, see flamia_train.rope).
    """
    return rope_table(seq_len, head_dim, theta, device, scaling)


def apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate consecutive pairs of x (B, S, H, Dh) by freqs (S, Dh/2); math in fp32, result in x's dtype."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))  # (B, S, H, Dh/2)
    out = torch.view_as_real(xc * freqs[None, :, None, :]).flatten(3)  # (B, S, H, Dh)
    return out.type_as(x)


# Linear ops of a block (precision recipes name these) and the submodules each covers.
LINEAR_OPS: dict[str, tuple[str, ...]] = {
    "qkv": ("attention.wq", "attention.wk", "attention.wv"),
    "out": ("attention.wo",),
    "mlp_up": ("mlp.w_gate", "mlp.w_up"),
    "mlp_down": ("mlp.w_down",),
}


class Attention(nn.Module):
    """Causal GQA self-attention through FLAMIA with a per-layer spec."""

    def __init__(self, cfg: ModelConfig, spec):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.spec = spec
        self.wq = FlamiaLinear(cfg.d_model, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = FlamiaLinear(cfg.d_model, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wv = FlamiaLinear(cfg.d_model, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wo = FlamiaLinear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None

    def init_weights(self, std: float, out_std: float) -> None:
        for w in (self.wq, self.wk, self.wv):
            nn.init.normal_(w.weight, mean=0.0, std=std)
        nn.init.normal_(self.wo.weight, mean=0.0, std=out_std)
        for norm in (self.q_norm, self.k_norm):
            if norm is not None:
                norm.reset_parameters()

    def forward(self, x: torch.Tensor, freqs: torch.Tensor, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        # Imported at call time so that building a model never depends on the kernel package.
        from flamia_kernels import flamia_attention

        B, S, _ = x.shape
        q = self.wq(x).view(B, S, self.n_heads, self.head_dim)  # (B, S, H, Dh)
        k = self.wk(x).view(B, S, self.n_kv_heads, self.head_dim)  # (B, S, Hkv, Dh)
        v = self.wv(x).view(B, S, self.n_kv_heads, self.head_dim)  # (B, S, Hkv, Dh)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, freqs), apply_rope(k, freqs)
        # The kernels take bf16 operands in (B, heads, S, Dh) and expand GQA themselves.
        q, k, v = (t.transpose(1, 2).to(torch.bfloat16) for t in (q, k, v))
        # doc_ids (B, S) or None: document masking (block-diagonal causal) inside the kernels, any spec.
        y = flamia_attention(q, k, v, spec=self.spec, causal=True, doc_ids=doc_ids)  # (B, H, S, Dh) bf16
        y = y.to(x.dtype).transpose(1, 2).reshape(B, S, self.n_heads * self.head_dim)  # (B, S, H·Dh)
        return self.wo(y)


class MLP(nn.Module):
    """SwiGLU: w_down(silu(w_gate x) * w_up x)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w_gate = FlamiaLinear(cfg.d_model, cfg.ffn_dim, bias=False)
        self.w_up = FlamiaLinear(cfg.d_model, cfg.ffn_dim, bias=False)
        self.w_down = FlamiaLinear(cfg.ffn_dim, cfg.d_model, bias=False)

    def init_weights(self, std: float, out_std: float) -> None:
        nn.init.normal_(self.w_gate.weight, mean=0.0, std=std)
        nn.init.normal_(self.w_up.weight, mean=0.0, std=std)
        nn.init.normal_(self.w_down.weight, mean=0.0, std=out_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    """Pre-norm transformer block: the unit that FSDP shards and checkpointing recomputes."""

    def __init__(self, cfg: ModelConfig, spec):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attention = Attention(cfg, spec)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def init_weights(self, std: float, out_std: float) -> None:
        self.attention_norm.reset_parameters()
        self.attention.init_weights(std, out_std)
        self.mlp_norm.reset_parameters()
        self.mlp.init_weights(std, out_std)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), freqs, doc_ids)  # (B, S, D_model)
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    """Decoder-only LM.

    `attention_specs`: one per layer, each a string or a `flamia_kernels.AttentionSpec`
    (handed to `flamia_attention` as is); None means "bf16" everywhere.
    """

    def __init__(self, cfg: ModelConfig, attention_specs: list | None = None):
        super().__init__()
        validate_model_config(cfg)
        self.cfg = replace(cfg)  # a private copy: set_rope_theta must not edit the caller's config
        specs = self._check_specs(attention_specs)
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, spec) for spec in specs)
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = FlamiaLinear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        # RoPE tables are computed lazily per (seq_len, device) and never stored in the state
        # dict, so a meta-device model needs nothing re-materialised after to_empty().
        self._rope_cache: dict[tuple[int, torch.device], torch.Tensor] = {}
        self.rope_scaling = RopeScaling()  # context extension: set_rope_scaling
        for salt, (_, _, linear) in enumerate(self.linear_modules()):
            linear.seed = salt  # distinct random draws (NVFP4 SR, Hadamard signs) per module
        if not self.tok_embeddings.weight.is_meta:
            self.init_weights()

    # ---- configuration at run time -------------------------------------------------------
    def _check_specs(self, specs: list | None) -> list:
        if specs is None:
            return ["bf16"] * self.cfg.n_layers
        specs = list(specs)
        if len(specs) != self.cfg.n_layers:
            raise ConfigError("precision", f"{len(specs)} attention specs",
                              f"need exactly one per layer (model.n_layers = {self.cfg.n_layers})")
        return specs

    def set_attention_specs(self, specs: list) -> None:
        """Replace the attention spec of every layer (one entry per layer)."""
        for block, spec in zip(self.layers, self._check_specs(specs), strict=True):
            block.attention.spec = spec

    @property
    def attention_specs(self) -> list:
        return [block.attention.spec for block in self.layers]

    def linear_modules(self) -> list[tuple[str, str, nn.Module]]:
        """Every FlamiaLinear as (layer label "L<i>" or "lm_head", op, module), ops as in LINEAR_OPS."""
        out = [(f"L{i}", op, block.get_submodule(path))
               for i, block in enumerate(self.layers) for op, paths in LINEAR_OPS.items() for path in paths]
        return out + [("lm_head", "lm_head", self.output)]

    def set_linear_specs(self, per_layer: list[dict], lm_head) -> None:
        """Formats of every linear: per layer {op: LinearSpec} for each op in LINEAR_OPS, and the LM head's."""
        if len(per_layer) != self.cfg.n_layers:
            raise ConfigError("precision", f"{len(per_layer)} layers of linear specs",
                              f"need exactly one per layer (model.n_layers = {self.cfg.n_layers})")
        for label, op, module in self.linear_modules():
            module.set_spec(lm_head if op == "lm_head" else per_layer[int(label[1:])][op])

    def set_rope_theta(self, theta: float) -> None:
        """Change the RoPE base from the next forward on (context-extension schedules)."""
        if theta <= 0:
            raise ConfigError("model.rope_theta", theta, "must be > 0")
        self.cfg.rope_theta = float(theta)
        self._rope_cache.clear()

    def set_rope_scaling(self, method: str = "none", factor: float = 1.0, original_seq_len: int = 0,
                         beta_fast: float = 32.0, beta_slow: float = 1.0) -> None:
        """Rescale RoPE from the next forward on: none | linear | ntk | yarn (flamia_train.rope).

        `factor` >= 1 is the context multiple; yarn also needs `original_seq_len`, the
        length the model was trained at. Raises ConfigError for a bad value.
        """
        scaling = RopeScaling(method, float(factor), int(original_seq_len), float(beta_fast), float(beta_slow))
        self.rope_scaling = scaling.check()
        self._rope_cache.clear()

    def _rope(self, seq_len: int, device: torch.device) -> torch.Tensor:
        key = (seq_len, device)
        if key not in self._rope_cache:
            self._rope_cache[key] = rope_frequencies(seq_len, self.cfg.head_dim, self.cfg.rope_theta, device,
                                                     self.rope_scaling)
        return self._rope_cache[key]

    # ---- weights -------------------------------------------------------------------------
    def _apply(self, fn, recurse=True):
        # nn.Module._apply swaps in a new Parameter when a tensor changes device type (e.g.
        # meta -> cpu in to_empty()), giving the head and the embedding separate copies: re-tie.
        super()._apply(fn, recurse)
        if self.cfg.tie_embeddings and self.output.weight is not self.tok_embeddings.weight:
            self.output.weight = self.tok_embeddings.weight
        return self

    @torch.no_grad()
    def init_weights(self) -> None:
        """Initialise every parameter from the global RNG in a fixed order.

        Embedding and the input projections (wq, wk, wv, w_gate, w_up): N(0, init_std).
        Output projections of each residual branch (wo, w_down): N(0, init_std / sqrt(2·n_layers)),
        as in GPT-2 / OLMo, so the residual stream's variance does not grow with depth.
        Untied LM head: N(0, init_std). RMSNorm weights: 1. The same seed gives the same
        weights whether the model was built eagerly or on `meta` and then `to_empty()`-ed.
        """
        std = self.cfg.init_std
        out_std = std / math.sqrt(2 * self.cfg.n_layers)
        nn.init.normal_(self.tok_embeddings.weight, mean=0.0, std=std)
        for block in self.layers:
            block.init_weights(std, out_std)
        self.norm.reset_parameters()
        if not self.cfg.tie_embeddings:
            nn.init.normal_(self.output.weight, mean=0.0, std=std)

    def num_params(self, exclude_embeddings: bool = False) -> int:
        """Parameter count (a tied matrix once); exclude_embeddings drops the embedding table."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.tok_embeddings.weight.numel() if exclude_embeddings else n

    def flops_per_token(self, seq_len: int) -> int:
        """Training FLOPs (forward + backward) per token at `seq_len`, causal attention counted half.

        6·N + 6·L·H·Dh·S, where N = non-embedding parameters plus the LM head (its matmul
        runs even when tied), and the attention term is 3 × (4·H·Dh·S per token per layer
        for QKᵀ and PV) × 1/2 for the causal mask — the benchmark's 4·B·H·S²·D·0.5
        forward, ×3 for forward + backward, divided by B·S tokens.
        """
        c = self.cfg
        n_matmul = self.num_params(exclude_embeddings=True)
        if c.tie_embeddings:
            n_matmul += c.vocab_size * c.d_model
        return 6 * n_matmul + 6 * c.n_layers * c.n_heads * c.head_dim * seq_len

    # ---- forward -------------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        """tokens (B, S) int64 -> logits (B, S, V) in the compute dtype.

        `doc_ids` (B, S) int64, optional: document index of each token (the loader's
        `next_batch(doc_ids=True)`); when given, attention stays inside each document.

        The compute dtype is the parameters' dtype: fp32 for a plain model, bf16 under
        FSDP2 with param_dtype=bf16. Take the loss on `logits.float()`.
        """
        _, S = tokens.shape
        freqs = self._rope(S, tokens.device)  # (S, Dh/2) complex64; FSDP never casts complex inputs
        h = self.tok_embeddings(tokens)  # (B, S, D_model)
        for block in self.layers:
            h = block(h, freqs, doc_ids)
        return self.output(self.norm(h))  # (B, S, V)
