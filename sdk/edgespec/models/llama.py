"""A Llama-family decoder (RMSNorm, RoPE, GQA, SwiGLU) written for `torch.export`.

- The KV cache lives in buffers of shape [1, max_seq_len, n_kv_heads, head_dim], written in
  place. Cache and attention are modules: plain PyTorch in eager code and training,
  ExecuTorch's `llama::update_cache` / `llama::custom_sdpa` inside
  `edgespec.export.swaps.executorch_ops(model)`, the context every export runs in.
- This file never calls a custom op: a block-kernel export swaps in subclasses of its
  modules that do (edgespec.export.kernel_modules), at the seams `Attention.project` /
  `rotate` and `FeedForward.project` / `activate`.
- Positions come in as an input: `forward(tokens [1, T], input_pos [1])`, `input_pos[0]`
  being the position of `tokens[:, 0]`. This is the calling convention of ExecuTorch's
  LLM runner with dynamic shapes, so the whole prompt is prefilled in one call.
- RoPE uses the interleaved-pair layout (llama.cpp / Meta); the HF loader permutes q/k.
- Parameter names follow Meta's checkpoint layout (`layers.N.attention.wq.weight`, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from edgespec.models.args import ACTIVATION_NAMES, LlamaArgs


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU's tanh approximation (Gemma's gate), written out:
    0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). Not `F.gelu(x, approximate="tanh")`:
    ExecuTorch 1.5.1's XNNPACK partitioner takes `aten.gelu` without reading `approximate` and
    computes the erf GELU (a tiny Gemma 3's fp32 program was 7.6e-4 off transformers' logits;
    written out, 2e-6)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))))


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"silu": F.silu, "gelu_tanh": gelu_tanh}
assert tuple(ACTIVATIONS) == ACTIVATION_NAMES, "the activations LlamaArgs accepts (edgespec.models.args) are the ones computed here"


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).unflatten(-1, (1, -1)).mean((-2, -1), keepdim=True).flatten(-2) + self.eps)
        return y.type_as(x) * self.weight


def rope_tables(head_dim: int, max_seq_len: int, theta: float, freq_factors: Sequence[float] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables: [max_seq_len, head_dim], each pair's angle repeated for both its elements.

    Frequency i is theta^(-2i/head_dim), divided by freq_factors[i] when given (llama3 scaling)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if freq_factors:
        inv_freq = inv_freq / torch.tensor(freq_factors, dtype=torch.float64)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq).repeat_interleave(2, -1)
    return angles.cos().float(), angles.sin().float()


def pair_swap(head_dim: int) -> torch.Tensor:
    """W [D, D] with (x W^T)_{2i} = -x_{2i+1}, (x W^T)_{2i+1} = x_{2i}."""
    w = torch.zeros(head_dim, head_dim)
    i = torch.arange(0, head_dim, 2)
    w[i, i + 1], w[i + 1, i] = -1.0, 1.0
    return w


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, swap: torch.Tensor | None = None) -> torch.Tensor:
    """Rotate interleaved pairs. x: [B, T, H, D]; cos, sin: [T, D] (`rope_tables` rows), or
    [B, T, D] when each sequence has its own positions (batched generation);
    swap: `pair_swap(D)` (a module's constant buffer, so a program holds it as a weight).

    x cos + swap(x) sin, swap(x) = (-x1, x0) per pair (x0, x1): per element exactly
    x0 cos - x1 sin and x1 cos + x0 sin. The swap is a product with a constant +-1 matrix,
    exact in fp32, so in a program the whole rotation is ops XNNPACK takes (no gathers or
    stacks between its partitions, which cost a delegate call each)."""
    B, T, H, D = x.shape
    xf = x.float()
    c, s = cos.view(-1, T, 1, D), sin.view(-1, T, 1, D)
    return (xf * c + F.linear(xf, pair_swap(D) if swap is None else swap) * s).type_as(x)


# Meta names of the tensors whose rows (or elements) follow RoPE's pair order
ROPE_ROWS = ("attention.wq.weight", "attention.wq.bias", "attention.wk.weight", "attention.wk.bias", "attention.q_norm.weight", "attention.k_norm.weight")


def interleave_rope_rows(w: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Rows (dim 0) of w from HF's rotate-half order within each head of `head_dim` to
    interleaved pairs, the order edgespec's RoPE (and llama.cpp's Llama) uses: row j of the
    first half and row j of the second half become rows 2j and 2j + 1. w: a weight
    [heads * head_dim, in], a bias [heads * head_dim] or a per-head norm weight [head_dim]."""
    rest = w.shape[1:]
    return w.reshape(-1, 2, head_dim // 2, *rest).transpose(1, 2).reshape(w.shape)


class KVCache(nn.Module):
    """Static cache, [1, max_seq_len, n_kv_heads, head_dim] per k and v, written in place.

    Eager code writes with plain tensor ops; `ExecuTorchKVCache` (swapped in by
    `edgespec.export.swaps.executorch_ops`) writes with ExecuTorch's `llama::update_cache` for export."""

    def __init__(self, k_cache: torch.Tensor, v_cache: torch.Tensor):
        super().__init__()
        self.register_buffer("k_cache", k_cache, persistent=False)
        self.register_buffer("v_cache", v_cache, persistent=False)

    @classmethod
    def zeros(cls, max_seq_len: int, n_kv_heads: int, head_dim: int, dtype: torch.dtype = torch.float32) -> KVCache:
        shape = (1, max_seq_len, n_kv_heads, head_dim)
        return cls(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype))

    @property
    def dtype(self) -> torch.dtype:
        """The dtype attention computes in: the cache's own, fp32 for an fp16 cache (`half_kv_cache_`:
        stored in fp16, read back widened)."""
        return torch.float32 if self.k_cache.dtype == torch.float16 else self.k_cache.dtype

    def write_(self, buf: torch.Tensor, start_pos, rows: torch.Tensor) -> None:
        """buf[:, start_pos : start_pos + T] = rows [1, T, Hkv, D]."""
        buf.narrow(1, start_pos, rows.shape[1]).copy_(rows)

    def write_rows_(self, buf: torch.Tensor, index: torch.Tensor, rows: torch.Tensor) -> None:
        """buf[:, index[t]] = rows[:, t] for rows [1, T, Hkv, D] at cache rows index [T]."""
        buf.index_copy_(1, index, rows.to(buf.dtype))

    def update(self, start_pos, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write rows [start_pos, start_pos + T); return the whole cache (k, v)."""
        self.write_(self.k_cache, start_pos, k)
        self.write_(self.v_cache, start_pos, v)
        return self.k_cache, self.v_cache

    def compact_(self, start_pos, slots: torch.Tensor) -> None:
        """Move the rows at absolute `slots` [n] to start_pos, start_pos + 1, ... (accepted tree path)."""
        for buf in (self.k_cache, self.v_cache):
            self.write_(buf, start_pos, buf.index_select(1, slots))


class SlotRows:
    """Where the rows of a `Transformer.decode_rows` call go: each row to its own cache row of a
    layer's static cache (`index` [T]), so rows of different sequences and positions share one
    call. `update` writes them and returns the whole cache, as `KVCache.update` does."""

    def __init__(self, cache: KVCache, index: torch.Tensor):
        self.cache, self.index = cache, index

    @property
    def dtype(self) -> torch.dtype:
        return self.cache.dtype

    def update(self, start_pos, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.cache.write_rows_(self.cache.k_cache, self.index, k)
        self.cache.write_rows_(self.cache.v_cache, self.index, v)
        return self.cache.k_cache, self.cache.v_cache


class GrowingKV:
    """Keys/values of one teacher-forced pass, no static cache: `update` appends the new rows
    to what it holds and returns everything (training, feature extraction, stream rows that
    attend to main-stream K/V without writing them)."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor):
        self.k, self.v = k, v

    @classmethod
    def empty(cls, batch: int, n_kv_heads: int, head_dim: int, dtype: torch.dtype = torch.float32) -> GrowingKV:
        e = torch.zeros(batch, 0, n_kv_heads, head_dim, dtype=dtype)
        return cls(e, e)

    @property
    def dtype(self) -> torch.dtype:
        return self.k.dtype

    def update(self, start_pos, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k, self.v = torch.cat([self.k, k], 1), torch.cat([self.v, v], 1)
        return self.k, self.v


class KeyRanges:
    """Which cache rows each query row sees, as ranges (a batched call's rows, each over its
    own sequence's slot: `Transformer.decode_rows`): row t sees [first[t], first[t] + count[t]).
    Attention takes it where it takes a mask; edgespec's exact attention reads the ranges
    themselves (no [T, cache] mask to build and scan)."""

    def __init__(self, first: torch.Tensor, count: torch.Tensor):
        self.first, self.count = first, count

    def visible(self, n: int) -> torch.Tensor:
        """The same as a boolean mask [T, n] over cache rows [0, n)."""
        keys = torch.arange(n)[None, :]
        return (keys >= self.first[:, None]) & (keys < (self.first + self.count)[:, None])


Mask = torch.Tensor | KeyRanges | None  # what attention is told to see besides causality (`SDPA`)


class SDPA(nn.Module):
    """Attention in plain PyTorch (training and every eager path).

    q [B, T, H, D] at cache slots start_pos..; k, v [B, S, Hkv, D] (S >= rows used).
    mask None: causal over keys [0, start_pos + T) (row i sees keys <= start_pos + i);
    else a mask [T, S'] (bool, True = visible, or additive float) over keys [0, S'), or one
    per sequence [B, 1, T, S'] (batched generation with padding), or `KeyRanges`."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start_pos, mask: Mask) -> torch.Tensor:
        T = q.shape[1]
        if isinstance(mask, KeyRanges):
            mask = mask.visible(k.shape[1])
        if mask is None:
            n = start_pos + T
            mask = torch.arange(n)[None, :] <= (start_pos + torch.arange(T))[:, None]  # [T, n]
        n = mask.shape[-1]
        k, v = k.narrow(1, 0, n).to(q.dtype), v.narrow(1, 0, n).to(q.dtype)  # an fp16 cache read widened
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype) if mask.is_floating_point() else mask, enable_gqa=q.shape[1] != k.shape[1])
        return y.transpose(1, 2)  # [B, T, H, D]


KVStore = GrowingKV | SlotRows | None  # where an attention's K/V go (None: its static cache)


def adapted(linear: nn.Linear, adapters, name: str, x: torch.Tensor) -> torch.Tensor:
    """linear(x) plus the additive adapter registered under `name`, if any (LoRA)."""
    return with_adapter(linear(x), adapters, name, x)


def with_adapter(y: torch.Tensor, adapters, name: str, x: torch.Tensor) -> torch.Tensor:
    """y (a linear's output on x) plus the additive adapter registered under `name`, if any."""
    return y if adapters is None or name not in adapters else y + adapters[name](x)


def additive_mask(visible: torch.Tensor) -> torch.Tensor:
    """A boolean visibility mask as the additive one attention takes: 0 where visible, -inf elsewhere."""
    return torch.zeros(visible.shape).masked_fill(~visible, float("-inf"))


def window_mask(window: int, start_pos, T: int, mask: torch.Tensor | None) -> torch.Tensor:
    """The additive mask [T, start_pos + T] (0 visible, -inf hidden) of rows at cache slots
    start_pos.. that are causal and limited to a sliding window: row i (position
    p = start_pos + i) sees keys p - window < j <= p. Only for the plain causal case: a given
    mask (tree rows, batched sequences) does not say each row's position."""
    if mask is not None:
        from edgespec.errors import EdgespecError

        raise EdgespecError("sliding-window layers under a tree or batch mask (speculative steps, batched decoding) are not implemented")
    pos = start_pos + torch.arange(T)[:, None]
    keys = torch.arange(start_pos + T)[None, :]
    return additive_mask((keys <= pos) & (keys > pos - window))


class Attention(nn.Module):
    """GQA attention with RoPE. The cache (`kv_cache`) and the attention op (`sdpa`) are
    modules: `edgespec.export.swaps.executorch_ops` swaps both for ExecuTorch's custom ops at export."""

    def __init__(self, args: LlamaArgs):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.head_dim
        self.wq = nn.Linear(args.dim, args.n_heads * args.head_dim, bias=args.qkv_bias)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=args.qkv_bias)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=args.qkv_bias)
        self.wo = nn.Linear(args.n_heads * args.head_dim, args.dim, bias=False)
        # Qwen3: q and k normalized per head before RoPE
        self.q_norm = RMSNorm(args.head_dim, args.norm_eps) if args.qk_norm else None
        self.k_norm = RMSNorm(args.head_dim, args.norm_eps) if args.qk_norm else None
        self.kv_cache = KVCache.zeros(args.max_seq_len, args.n_kv_heads, args.head_dim)
        self.sdpa = SDPA()
        self.register_buffer("rope_swap", pair_swap(args.head_dim), persistent=False)
        self.window = 0  # sliding-window layers: keys within this many positions (`Transformer` sets it; its `run_layers` passes the mask)
        self.rope_table = 0  # which head_dim-wide half of the rope tables: 0 the model's base, 1 the local layers'
        # Gemma's query_pre_attn_scalar: q pre-multiplied so that SDPA's head_dim^-0.5 makes it
        self.q_scale = args.attn_scale * args.head_dim**0.5 if args.attn_scale else 1.0

    def project(self, x: torch.Tensor, adapters=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of rows x [B, T, d]: [B, T, H * D], [B, T, Hkv * D] twice, each plus its adapter."""
        return adapted(self.wq, adapters, "wq", x), adapted(self.wk, adapters, "wk", x), adapted(self.wv, adapters, "wv", x)

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """RoPE of x [B, T, H, D] at angles cos, sin [T, D] (`apply_rope`)."""
        return apply_rope(x, cos, sin, self.rope_swap)

    def forward(self, x: torch.Tensor, start_pos, cos: torch.Tensor, sin: torch.Tensor, adapters=None, mask: Mask = None, kv: KVStore = None) -> torch.Tensor:
        """x [B, T, d] at rotary angles cos/sin [T, D/2], cache slots start_pos.. .

        kv: where K/V go and come from: None = this layer's static cache (rows
        [start_pos, start_pos + T) are written), or a `GrowingKV`. mask: see `SDPA`."""
        B, T, _ = x.shape
        q, k, v = self.project(x, adapters)
        q = q.view(B, T, self.n_heads, self.head_dim)
        k = k.view(B, T, self.n_kv_heads, self.head_dim)
        v = v.view(B, T, self.n_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if cos.shape[-1] != self.head_dim:  # tables of two bases side by side (`Transformer.rope`)
            cos, sin = cos.narrow(-1, self.rope_table * self.head_dim, self.head_dim), sin.narrow(-1, self.rope_table * self.head_dim, self.head_dim)
        if self.q_scale != 1.0:
            q = q * self.q_scale
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        kv = self.kv_cache if kv is None else kv
        cdt = kv.dtype  # the cache and attention stay fp32 in fp16 models
        keys, values = kv.update(start_pos, k.to(cdt), v.to(cdt))
        y = self.sdpa(q.to(cdt), keys, values, start_pos, mask)  # [B, T, H, D]
        return adapted(self.wo, adapters, "wo", y.reshape(B, T, -1).to(x.dtype))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, activation: str = "silu"):
        super().__init__()
        self.activation = activation  # ACTIVATIONS' key: the gate's
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)  # gate
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)  # up
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)  # down

    def project(self, x: torch.Tensor, adapters=None) -> tuple[torch.Tensor, torch.Tensor]:
        """gate, up of rows x [..., dim]: [..., hidden_dim] each, each plus its adapter."""
        return adapted(self.w1, adapters, "w1", x), adapted(self.w3, adapters, "w3", x)

    def activate(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """The gated activation: act(gate) * up."""
        return ACTIVATIONS[self.activation](gate) * up

    def forward(self, x: torch.Tensor, adapters=None) -> torch.Tensor:
        return adapted(self.w2, adapters, "w2", self.activate(*self.project(x, adapters)))


def linear_shapes(args: LlamaArgs) -> dict[str, tuple[int, int]]:
    """(in, out) features of a block's linears by name, in the block's order (wq..wo, w1..w3):
    what an additive adapter of each maps."""
    q, kv = args.n_heads * args.head_dim, args.n_kv_heads * args.head_dim
    d, f = args.dim, args.hidden_dim
    return {"wq": (d, q), "wk": (d, kv), "wv": (d, kv), "wo": (q, d), "w1": (d, f), "w2": (f, d), "w3": (d, f)}


class TransformerBlock(nn.Module):
    def __init__(self, args: LlamaArgs):
        super().__init__()
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.feed_forward = FeedForward(args.dim, args.hidden_dim, args.activation)
        # Gemma: the sublayers' outputs normalized too, before each residual add
        self.attention_post_norm = RMSNorm(args.dim, args.norm_eps) if args.sandwich_norms else None
        self.ffn_post_norm = RMSNorm(args.dim, args.norm_eps) if args.sandwich_norms else None

    def forward(self, x: torch.Tensor, start_pos, cos: torch.Tensor, sin: torch.Tensor, adapters=None, mask: Mask = None, kv: KVStore = None) -> torch.Tensor:
        """The one decoder block of edgespec: main-stream rows, tree rows and stream rows all
        run through it. adapters: optional additive maps by linear name (wq..w3), e.g. LoRA;
        mask, kv: see `Attention`."""
        a = self.attention(self.attention_norm(x), start_pos, cos, sin, adapters, mask, kv)
        h = x + (a if self.attention_post_norm is None else self.attention_post_norm(a))
        f = self.feed_forward(self.ffn_norm(h), adapters)
        return h + (f if self.ffn_post_norm is None else self.ffn_post_norm(f))


class Transformer(nn.Module):
    """The decoder. ``forward(tokens [1, T], input_pos [1]) -> logits of the last position [1, V]``."""

    def __init__(self, args: LlamaArgs):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        if args.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rope_tables(args.head_dim, args.max_seq_len, args.rope_theta, args.rope_freq_factors)
        if args.local_rope:  # the local layers' tables beside the model's: [max_seq_len, 2 head_dim]
            local_cos, local_sin = rope_tables(args.head_dim, args.max_seq_len, args.local_rope_theta)
            cos, sin = torch.cat([cos, local_cos], -1), torch.cat([sin, local_sin], -1)
        for i in args.local_layers:
            # a window that covers the whole cache never hides a key: full attention, no mask
            self.layers[i].attention.window = args.sliding_window if args.sliding_window < args.max_seq_len else 0
            self.layers[i].attention.rope_table = int(args.local_rope)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    # partial forward: the pieces drafters, the speculative step and batched decoding run
    # (`norm` and `output` are the final norm and the lm head)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token embeddings: [...] -> [..., dim] (times sqrt(dim) in the embedding's dtype where
        `embed_scale`, as Gemma's)."""
        x = self.tok_embeddings(tokens)
        return x * torch.tensor(self.args.dim**0.5, dtype=x.dtype) if self.args.embed_scale else x

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE cos, sin [T, head_dim] at positions [T] (`apply_rope`'s tables); [T, 2 head_dim]
        when the local layers have a base of their own (each attention takes its half)."""
        return self.rope_cos.index_select(0, positions), self.rope_sin.index_select(0, positions)

    def run_layers(
        self,
        x: torch.Tensor,
        start: int,
        stop: int,
        start_pos,
        cos: torch.Tensor,
        sin: torch.Tensor,
        adapters: Callable[[int], nn.ModuleDict | None] | None = None,
        mask: Mask = None,
        kvs: Sequence | None = None,
    ) -> torch.Tensor:
        """Layers [start, stop) over rows x [B, T, dim] at cache slots start_pos.. and RoPE
        cos/sin (`rope`). adapters: layer index -> its adapters (`TransformerBlock`), or None;
        kvs: one K/V store per layer of the model, by layer index (`new_kvs`), None = the
        static caches; mask: see `SDPA` (the sliding-window layers get `window_mask` instead, built once)."""
        windowed = None  # the sliding-window layers' mask, built once for all of them
        for i in range(start, stop):
            layer_mask = mask
            if self.layers[i].attention.window:
                if windowed is None:
                    windowed = window_mask(self.layers[i].attention.window, start_pos, x.shape[1], mask)
                layer_mask = windowed
            x = self.layers[i](x, start_pos, cos, sin, None if adapters is None else adapters(i), layer_mask, None if kvs is None else kvs[i])
        return x

    def new_kvs(self, batch: int, dtype: torch.dtype) -> list[GrowingKV]:
        """Empty K/V stores for a teacher-forced pass (no static cache), one per layer."""
        a = self.args
        return [GrowingKV.empty(batch, a.n_kv_heads, a.head_dim, dtype) for _ in range(a.n_layers)]

    def compact_cache_(self, start_pos, slots: torch.Tensor) -> None:
        """In every layer's static cache, move the rows at `slots` [n] to start_pos.. (`KVCache.compact_`)."""
        for layer in self.layers:
            layer.attention.kv_cache.compact_(start_pos, slots)

    def hidden(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """Final-norm hidden states of every position: [1, T, dim]. Writes the KV cache."""
        T = tokens.shape[1]
        start_pos = input_pos[0].item()
        torch._check(start_pos >= 0)
        torch._check(start_pos + T <= self.args.max_seq_len)
        cos = self.rope_cos.narrow(0, start_pos, T)
        sin = self.rope_sin.narrow(0, start_pos, T)
        x = self.run_layers(self.embed(tokens), 0, self.args.n_layers, start_pos, cos, sin)
        return self.norm(x)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        h = self.hidden(tokens, input_pos)
        return self.output(h[:, -1, :]).float()  # lm head on the last row only: [1, V], fp32

    @property
    def batch_slots(self) -> int:
        """Sequences the static caches hold side by side (`with_batch_slots_`): slot b is cache
        rows [b * max_seq_len, (b + 1) * max_seq_len); `forward` and the speculative methods use slot 0."""
        return self.layers[0].attention.kv_cache.k_cache.shape[1] // self.args.max_seq_len

    def decode_rows(self, tokens: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor, emit: torch.Tensor) -> torch.Tensor:
        """Rows of several sequences in one call (batched decoding; a new prompt's chunk can sit
        beside other sequences' next tokens). tokens [1, T]; row t is at position positions[t] of
        the sequence in cache slot slots[t] (both [T]): it writes its K/V there and attends to
        that slot's keys at positions [0, positions[t]] only. emit [E]: the rows whose logits
        are returned, [E, V] fp32.

        Every row's arithmetic is its own on the block kernel and the exact attention (the
        row-invariant kernels), so in such a program a sequence decoded beside others is
        bitwise the sequence decoded alone."""
        S = self.args.max_seq_len
        index = slots * S + positions  # [T] the cache row each row writes
        sees = KeyRanges(slots * S, positions + 1)  # its slot's rows up to itself
        cos, sin = self.rope(positions)
        kvs = [SlotRows(layer.attention.kv_cache, index) for layer in self.layers]
        x = self.run_layers(self.embed(tokens), 0, self.args.n_layers, 0, cos, sin, mask=sees, kvs=kvs)
        return self.output(self.norm(x)[0].index_select(0, emit)).float()

    def next_token(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """The greedy next token, int64 [1]: `forward`'s argmax (first largest). A head that
        can find its argmax without every logit (`BlockLinear.argmax`: a screened Q8_0 head)
        does."""
        h = self.hidden(tokens, input_pos)[:, -1, :]
        argmax = getattr(self.output, "argmax", None)
        return argmax(h) if argmax is not None else self.output(h).float().argmax(-1)

    def to_half_(self, dtype: torch.dtype = torch.float16) -> Transformer:
        """Half-precision (fp16, or `dtype`) weights and activations; KV cache, attention and
        RoPE tables stay fp32."""
        self.to(dtype)
        self.rope_cos, self.rope_sin = self.rope_cos.float(), self.rope_sin.float()
        for m in self.modules():
            if isinstance(m, Attention):
                m.rope_swap = m.rope_swap.float()  # RoPE runs in fp32
        for m in self.modules():
            if isinstance(m, KVCache):
                m.k_cache, m.v_cache = m.k_cache.float(), m.v_cache.float()
        return self

    def reset_cache(self) -> None:
        for m in self.modules():
            if isinstance(m, KVCache):
                m.k_cache.zero_()
                m.v_cache.zero_()


def half_kv_cache_(model: nn.Module) -> nn.Module:
    """Every attention's static KV cache stored in fp16 (`quant.kv_cache: fp16`): half its bytes.
    Keys and values are rounded to fp16 as they are written and widened back exactly as they
    are read; attention still computes in fp32 (edgespec's exact kernel reads fp16 caches)."""
    for m in model.modules():
        if isinstance(m, Attention):
            c = m.kv_cache
            c.k_cache, c.v_cache = c.k_cache.half(), c.v_cache.half()
    return model


def with_batch_slots_(model: Transformer, slots: int) -> Transformer:
    """Every attention's static cache holds `slots` sequences of the model's context side by
    side ([1, slots * max_seq_len, Hkv, D], `Transformer.batch_slots`), for `decode_rows`;
    what the caches held is gone."""
    length = slots * model.args.max_seq_len
    for m in model.modules():
        if isinstance(m, KVCache):
            shape = (1, length, *m.k_cache.shape[2:])
            m.k_cache, m.v_cache = torch.zeros(shape, dtype=m.k_cache.dtype), torch.zeros(shape, dtype=m.v_cache.dtype)
    return model


@contextmanager
def attention_op(model: nn.Module, sdpa: SDPA):
    """Within the block every attention of `model` runs `sdpa` (e.g. a kernel for one mask's
    structure); on exit each has its own back."""
    swapped = [(m, m.sdpa) for m in model.modules() if isinstance(m, Attention)]
    for m, _ in swapped:
        m.sdpa = sdpa
    try:
        yield model
    finally:
        for m, own in swapped:
            m.sdpa = own
