"""A Llama-family decoder (RMSNorm, RoPE, GQA, SwiGLU) written for `torch.export`.

- The KV cache lives in buffers of shape [1, max_seq_len, n_kv_heads, head_dim] and is
  written in place by ExecuTorch's `llama::update_cache` op; attention is ExecuTorch's
  `llama::custom_sdpa` (causal, GQA-aware, reads only the first start_pos + T cache rows).
- Positions come in as an input: `forward(tokens [1, T], input_pos [1])`, `input_pos[0]`
  being the position of `tokens[:, 0]`. This is the calling convention of ExecuTorch's
  LLM runner with dynamic shapes, so the whole prompt is prefilled in one call.
- RoPE uses the interleaved-pair layout (llama.cpp / Meta); the HF loader permutes q/k.
- Parameter names follow Meta's checkpoint layout (`layers.N.attention.wq.weight`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


def load_executorch_llm_ops() -> None:
    """Register ExecuTorch's LLM custom ops (`llama::custom_sdpa`, `llama::update_cache`)."""
    from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401


@dataclass(frozen=True)
class LlamaArgs:
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

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def __post_init__(self) -> None:
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads or self.head_dim % 2:
            raise ValueError(f"inconsistent attention shape: dim={self.dim} heads={self.n_heads} kv_heads={self.n_kv_heads}")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight


def rope_tables(head_dim: int, max_seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables: [max_seq_len, head_dim // 2]."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs. x: [B, T, H, D]; cos, sin: [T, D/2]."""
    xp = x.float().unflatten(-1, (-1, 2))  # [B, T, H, D/2, 2]
    x0, x1 = xp[..., 0], xp[..., 1]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return out.flatten(-2).type_as(x)


class KVCache(nn.Module):
    """Static cache, [1, max_seq_len, n_kv_heads, head_dim] per k and v, updated in place."""

    def __init__(self, max_seq_len: int, n_kv_heads: int, head_dim: int, dtype: torch.dtype = torch.float32):
        super().__init__()
        shape = (1, max_seq_len, n_kv_heads, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype), persistent=False)

    def update(self, start_pos: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        torch.ops.llama.update_cache(k, self.k_cache, start_pos)
        torch.ops.llama.update_cache(v, self.v_cache, start_pos)
        return self.k_cache, self.v_cache


def adapted(linear: nn.Linear, adapters, name: str, x: torch.Tensor) -> torch.Tensor:
    """linear(x) plus the additive adapter registered under `name`, if any (LoRA)."""
    y = linear(x)
    if adapters is not None and name in adapters:
        y = y + adapters[name](x)
    return y


class Attention(nn.Module):
    def __init__(self, args: LlamaArgs):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.head_dim
        self.wq = nn.Linear(args.dim, args.n_heads * args.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * args.head_dim, args.dim, bias=False)
        self.kv_cache = KVCache(args.max_seq_len, args.n_kv_heads, args.head_dim)

    def forward(
        self, x: torch.Tensor, start_pos: int, cos: torch.Tensor, sin: torch.Tensor, adapters=None, mask: torch.Tensor | None = None, per_row: bool = False
    ) -> torch.Tensor:
        """x [B, T, d] at positions start_pos.. (or as cos/sin say). Writes K/V to cache rows
        [start_pos, start_pos + T). mask None: causal over rows [0, start_pos + T); else an
        additive float mask [T, start_pos + T] over those rows (tree attention).

        per_row: attend one query row per op call (for a few rows with a static count). The
        op's single-row path is ~10x faster than its multi-row path for T = 4 at a 200-token
        context on a CPU, and it computes every row exactly as one-token decoding does."""
        B, T, _ = x.shape
        q = adapted(self.wq, adapters, "wq", x).view(B, T, self.n_heads, self.head_dim)
        k = adapted(self.wk, adapters, "wk", x).view(B, T, self.n_kv_heads, self.head_dim)
        v = adapted(self.wv, adapters, "wv", x).view(B, T, self.n_kv_heads, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        cdt = self.kv_cache.k_cache.dtype  # the cache and attention stay fp32 in fp16 models
        k_cache, v_cache = self.kv_cache.update(start_pos, k.to(cdt), v.to(cdt))
        q = q.to(cdt)
        if mask is not None:  # with a mask the op attends to every row it is given: pass only [0, start_pos + T)
            n = mask.shape[1]
            k_cache, v_cache, mask = k_cache.narrow(1, 0, n), v_cache.narrow(1, 0, n), mask.to(cdt)
        if per_row:
            y = torch.cat([self._sdpa(q[:, i : i + 1], k_cache, v_cache, start_pos + i, None if mask is None else mask[i : i + 1]) for i in range(T)], 1)
        else:
            y = self._sdpa(q, k_cache, v_cache, start_pos, mask)  # [B, T, H, D]
        return adapted(self.wo, adapters, "wo", y.reshape(B, T, -1).to(x.dtype))


    @staticmethod
    def _sdpa(q, k_cache, v_cache, start_pos, mask):
        """ExecuTorch's SDPA (GQA-aware): causal over cache rows [0, start_pos + T) when mask is
        None, else over all the rows it is given with the additive mask."""
        if mask is None:
            return torch.ops.llama.custom_sdpa(q, k_cache, v_cache, start_pos, None, 0.0, True)
        return torch.ops.llama.custom_sdpa(q, k_cache, v_cache, 0, mask, 0.0, False)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)  # gate
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)  # up
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)  # down

    def forward(self, x: torch.Tensor, adapters=None) -> torch.Tensor:
        return adapted(self.w2, adapters, "w2", F.silu(adapted(self.w1, adapters, "w1", x)) * adapted(self.w3, adapters, "w3", x))


class TransformerBlock(nn.Module):
    def __init__(self, args: LlamaArgs):
        super().__init__()
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.feed_forward = FeedForward(args.dim, args.hidden_dim)

    def forward(
        self, x: torch.Tensor, start_pos: int, cos: torch.Tensor, sin: torch.Tensor, adapters=None, mask: torch.Tensor | None = None, per_row: bool = False
    ) -> torch.Tensor:
        """adapters: optional additive maps by linear name (wq..w3), e.g. LoRA; mask, per_row: see Attention."""
        h = x + self.attention(self.attention_norm(x), start_pos, cos, sin, adapters, mask, per_row)
        return h + self.feed_forward(self.ffn_norm(h), adapters)


class Transformer(nn.Module):
    """The decoder. ``forward(tokens [1, T], input_pos [1]) -> logits of the last position [1, V]``."""

    def __init__(self, args: LlamaArgs):
        super().__init__()
        load_executorch_llm_ops()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        if args.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rope_tables(args.head_dim, args.max_seq_len, args.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def hidden(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """Final-norm hidden states of every position: [1, T, dim]. Writes the KV cache."""
        T = tokens.shape[1]
        start_pos = input_pos[0].item()
        torch._check(start_pos >= 0)
        torch._check(start_pos + T <= self.args.max_seq_len)
        cos = self.rope_cos.narrow(0, start_pos, T)
        sin = self.rope_sin.narrow(0, start_pos, T)
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, start_pos, cos, sin)
        return self.norm(x)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        h = self.hidden(tokens, input_pos)
        return self.output(h[:, -1, :]).float()  # lm head on the last row only: [1, V], fp32

    def to_half_(self) -> "Transformer":
        """fp16 weights and activations; KV cache, attention and RoPE tables stay fp32."""
        self.half()
        self.rope_cos, self.rope_sin = self.rope_cos.float(), self.rope_sin.float()
        for m in self.modules():
            if isinstance(m, KVCache):
                m.k_cache, m.v_cache = m.k_cache.float(), m.v_cache.float()
        return self

    def reset_cache(self) -> None:
        for m in self.modules():
            if isinstance(m, KVCache):
                m.k_cache.zero_()
                m.v_cache.zero_()
