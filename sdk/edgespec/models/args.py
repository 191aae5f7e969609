"""The decoder's architecture as plain data: `LlamaArgs`, without torch.

`edgespec.models.llama` computes it; a bundle's manifest holds it (`edgespec.manifest.LmModelInfo`
derives from it), so a manifest is read without importing torch, and an architecture option is
declared once, here.
"""

from __future__ import annotations

from dataclasses import dataclass

ACTIVATION_NAMES = ("silu", "gelu_tanh")
"""The feed-forward gates the decoder computes (`edgespec.models.llama.ACTIVATIONS`, in this order)."""


@dataclass(frozen=True)
class LlamaArgs:
    """The decoder's shape and the architecture options of the families it computes.

    head_dim: 0 = dim / n_heads (Qwen3 sets its own). qkv_bias: q/k/v projections carry a
    bias (Qwen2). qk_norm: an RMSNorm over each head of q and k before RoPE (Qwen3).
    rope_freq_factors: per rotary frequency, the divisor of its angle (Llama 3.1's `llama3`
    rope scaling; GGUF's `rope_freqs.weight`); empty = none.

    Gemma 3's options: sandwich_norms: an RMSNorm on the attention's and the feed-forward's
    outputs too, before each residual add. activation: the feed-forward's gate, "silu"
    (SwiGLU) or "gelu_tanh" (GeGLU with the tanh GELU). embed_scale: embeddings multiplied by
    sqrt(dim). attn_scale: the query-key scale, 0 = head_dim^-0.5. sliding_window: keys a
    query of the layers in `local_layers` sees (its own position and the window - 1 before);
    0 = none. local_rope_theta: those layers' rope base (0 = rope_theta)."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    hidden_dim: int
    vocab_size: int
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_embeddings: bool = True
    max_seq_len: int = 1024
    head_dim: int = 0
    qkv_bias: bool = False
    qk_norm: bool = False
    rope_freq_factors: tuple[float, ...] = ()
    sandwich_norms: bool = False
    activation: str = "silu"
    embed_scale: bool = False
    attn_scale: float = 0.0
    sliding_window: int = 0
    local_layers: tuple[int, ...] = ()
    local_rope_theta: float = 0.0

    def __post_init__(self) -> None:
        sizes = ("dim", "n_layers", "n_heads", "n_kv_heads", "hidden_dim", "vocab_size")
        if bad := [f"{n}={getattr(self, n)}" for n in sizes if getattr(self, n) < 1]:
            raise ValueError("shape sizes must be positive: " + ", ".join(bad))
        if not self.head_dim:
            if self.dim % self.n_heads:
                raise ValueError(f"inconsistent attention shape: dim={self.dim} is not a multiple of heads={self.n_heads}")
            object.__setattr__(self, "head_dim", self.dim // self.n_heads)
        if self.n_heads % self.n_kv_heads or self.head_dim % 2:
            raise ValueError(f"inconsistent attention shape: heads={self.n_heads} kv_heads={self.n_kv_heads} head_dim={self.head_dim}")
        object.__setattr__(self, "rope_freq_factors", tuple(float(f) for f in self.rope_freq_factors))
        if self.rope_freq_factors and len(self.rope_freq_factors) != self.head_dim // 2:
            raise ValueError(f"{len(self.rope_freq_factors)} rope frequency factors for head_dim {self.head_dim} (need {self.head_dim // 2})")
        object.__setattr__(self, "local_layers", tuple(sorted(int(i) for i in self.local_layers)))
        if self.activation not in ACTIVATION_NAMES:
            raise ValueError(f"activation '{self.activation}' (supported: {', '.join(ACTIVATION_NAMES)})")
        if any(not 0 <= i < self.n_layers for i in self.local_layers) or bool(self.local_layers) != (self.sliding_window > 0):
            raise ValueError(f"sliding window {self.sliding_window} over layers {self.local_layers} of {self.n_layers}")

    @property
    def local_rope(self) -> bool:
        """Whether the local layers rotate by a base of their own (the rope tables hold both)."""
        return bool(self.local_layers) and self.local_rope_theta not in (0.0, self.rope_theta)
