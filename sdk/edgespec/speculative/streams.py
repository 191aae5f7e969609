"""Multi-stream attention (Speculative Streaming) over a loaded `Transformer`.

The top `n_layers` of the base model become MSA layers. Besides the main stream there
are `gamma` speculative streams; stream j at position t predicts the token j steps after
the main stream's next token. Streams enter at layer L0 = N - n_layers as

    S[t, j] = f(M[t]) + P[j]                 f = identity, or identity + rank-eta map

and in every MSA layer a stream row (t, j) attends to the main stream's keys/values at
positions visible from t and to the stream rows (t, i <= j). Only main rows are written
to the KV cache: streams add none.

Modes
- lossless: adapters (stream LoRA, f, P) touch only stream rows; the main stream runs the
  untouched base weights, so the main stream's output is the base model's.
- shared: the LoRA adapters apply to main rows as well and are fine-tuned with them.

Everything here is plain tensor code with explicit masks: the same function serves
teacher-forced training (`forward_train`) and tree verification (`forward_tree`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from edgespec.models.llama import Transformer, TransformerBlock, adapted, apply_rope
from edgespec.speculative.tree import Tree

ADAPTED = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")


@dataclass(frozen=True)
class MSAConfig:
    gamma: int = 3
    n_layers: int = 4
    lora_rank: int = 16
    f_rank: int = 0
    mode: str = "lossless"  # "lossless" | "shared"


class LoRA(nn.Module):
    """x -> B(A x) * scale; B starts at zero so an untrained adapter is the identity map."""

    def __init__(self, d_in: int, d_out: int, rank: int, alpha: float | None = None):
        super().__init__()
        self.A = nn.Parameter(torch.randn(rank, d_in) / math.sqrt(d_in))
        self.B = nn.Parameter(torch.zeros(d_out, rank))
        self.scale = (alpha or rank) / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(x, self.A), self.B) * self.scale


def _linears(block: TransformerBlock) -> dict[str, nn.Linear]:
    a, f = block.attention, block.feed_forward
    return {"wq": a.wq, "wk": a.wk, "wv": a.wv, "wo": a.wo, "w1": f.w1, "w2": f.w2, "w3": f.w3}


class StreamParams(nn.Module):
    """Every trained parameter of Speculative Streaming (a few hundred KB to a few MB)."""

    def __init__(self, base: Transformer, cfg: MSAConfig):
        super().__init__()
        a = base.args
        self.cfg = cfg
        self.stream_emb = nn.Parameter(torch.randn(cfg.gamma, a.dim) * 0.02)  # P_j
        self.f = nn.Sequential(nn.Linear(a.dim, cfg.f_rank, bias=False), nn.Linear(cfg.f_rank, a.dim, bias=False)) if cfg.f_rank else None
        if self.f is not None:
            nn.init.zeros_(self.f[1].weight)
        first = a.n_layers - cfg.n_layers
        self.lora = nn.ModuleList()
        for block in base.layers[first:]:
            if cfg.lora_rank:
                self.lora.append(nn.ModuleDict({n: LoRA(l.in_features, l.out_features, cfg.lora_rank) for n, l in _linears(block).items()}))
            else:
                self.lora.append(nn.ModuleDict())

    def enter(self, h: torch.Tensor) -> torch.Tensor:
        """Stream inputs from main hidden states: [..., d] -> [..., gamma, d]."""
        if self.f is not None:
            h = h + self.f(h)
        return h.unsqueeze(-2) + self.stream_emb


def _proj(block: TransformerBlock, lora: nn.ModuleDict | None, name: str, x: torch.Tensor) -> torch.Tensor:
    return adapted(_linears(block)[name], lora, name, x)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """q [B, Tq, H, D], k/v [B, Tk, Hkv, D], mask [Tq, Tk] bool (True = visible) -> [B, Tq, H, D]."""
    rep = q.shape[2] // k.shape[2]
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if rep > 1:
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2)


def block_rows(
    base: Transformer,
    block: TransformerBlock,
    lora: nn.ModuleDict | None,
    x: torch.Tensor,
    pos: torch.Tensor,
    ctx_k: torch.Tensor,
    ctx_v: torch.Tensor,
    mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decoder block over query rows x [B, Tq, d] at positions pos [Tq].

    Keys/values are ctx (already projected, [B, Tc, Hkv, D]) followed by the rows' own;
    mask is [Tq, Tc + Tq]. Returns (new x, own k, own v).
    """
    a = base.args
    B, Tq, _ = x.shape
    cos, sin = base.rope_cos[pos], base.rope_sin[pos]
    h = block.attention_norm(x)
    q = apply_rope(_proj(block, lora, "wq", h).view(B, Tq, a.n_heads, a.head_dim), cos, sin)
    k = apply_rope(_proj(block, lora, "wk", h).view(B, Tq, a.n_kv_heads, a.head_dim), cos, sin)
    v = _proj(block, lora, "wv", h).view(B, Tq, a.n_kv_heads, a.head_dim)
    y = _attend(q, torch.cat([ctx_k, k], 1), torch.cat([ctx_v, v], 1), mask)
    x = x + _proj(block, lora, "wo", y.reshape(B, Tq, -1))
    h = block.ffn_norm(x)
    x = x + _proj(block, lora, "w2", F.silu(_proj(block, lora, "w1", h)) * _proj(block, lora, "w3", h))
    return x, k, v


def stream_mask(main_mask: torch.Tensor, gamma: int) -> torch.Tensor:
    """Mask of stream rows (t, j), flattened t-major: [T*g, Tk + T*g].

    Row (t, j) sees the main keys row t of main_mask sees, and stream rows (t, i <= j).
    """
    T = main_mask.shape[0]
    own = torch.tril(torch.ones(gamma, gamma, dtype=torch.bool))
    block_diag = torch.block_diag(*([own] * T)) if T else torch.zeros(0, 0, dtype=torch.bool)
    return torch.cat([main_mask.repeat_interleave(gamma, 0), block_diag], 1)


def causal_context(base: Transformer, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Teacher forcing over tokens [B, T]: positions [T], causal mask [T, T], empty K/V context."""
    T = tokens.shape[1]
    empty = torch.zeros(tokens.shape[0], 0, base.args.n_kv_heads, base.args.head_dim, dtype=base.rope_cos.dtype)
    return torch.arange(T), torch.tril(torch.ones(T, T, dtype=torch.bool)), empty


@torch.no_grad()
def frozen_layers(base: Transformer, x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Base layers [start, stop) over teacher-forced rows x [B, T, d], no adapters, no cache."""
    pos, causal, empty = causal_context(base, x[..., 0])
    for i in range(start, stop):
        x, _, _ = block_rows(base, base.layers[i], None, x, pos, empty, empty, causal)
    return x


def topk_draft(base: Transformer, hidden: torch.Tensor, tree: Tree) -> torch.Tensor:
    """Candidates per depth from hidden states [>= g, d] of the drafting rows: [g, k_max]."""
    logits = base.output(hidden[: len(tree.branching)])  # [g, V]
    return logits.topk(max(tree.branching), -1).indices


class SpecModel(nn.Module):
    """A base `Transformer` plus speculative streams. The base weights are never modified."""

    def __init__(self, base: Transformer, params: StreamParams | None):
        super().__init__()
        self.base = base
        self.params = params  # None: plain tree verification, no streams (baselines)
        self.cfg = params.cfg if params is not None else MSAConfig(gamma=0, n_layers=0, lora_rank=0)
        self.first = base.args.n_layers - self.cfg.n_layers

    def _main_lora(self, i: int) -> nn.ModuleDict | None:
        return self.params.lora[i - self.first] if self.cfg.mode == "shared" and i >= self.first else None

    def _streams(self, h_s: torch.Tensor, i: int, pos: torch.Tensor, main_k: torch.Tensor, main_v: torch.Tensor, main_mask: torch.Tensor) -> torch.Tensor:
        """One MSA layer for stream rows h_s [B, T, g, d] at base positions pos [T]."""
        B, T, g, d = h_s.shape
        spos = (pos[:, None] + torch.arange(1, g + 1)).reshape(-1)  # stream j sits j steps ahead
        x, _, _ = block_rows(self.base, self.base.layers[i], self.params.lora[i - self.first], h_s.reshape(B, T * g, d), spos, main_k, main_v, stream_mask(main_mask, g))
        return x.view(B, T, g, d)

    def forward_train(self, tokens: torch.Tensor, h0: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced pass. tokens [B, T]; h0 optional cached input of layer L0 [B, T, d].

        Returns (main final hidden [B, T, d], stream final hidden [B, T, g, d]), both
        after the final norm; apply `base.output` for logits.
        """
        base = self.base
        pos, causal, empty = causal_context(base, tokens)
        if h0 is None:
            h0 = self.lower_hidden(tokens)
        x, h_s = h0, self.params.enter(h0)
        for i in range(self.first, base.args.n_layers):
            x_new, k, v = block_rows(base, base.layers[i], self._main_lora(i), x, pos, empty, empty, causal)
            h_s = self._streams(h_s, i, pos, k, v, causal)
            x = x_new
        return base.norm(x), base.norm(h_s)

    @torch.no_grad()
    def lower_hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """Input of layer L0 for teacher forcing (the frozen part; cacheable). [B, T, d]."""
        return frozen_layers(self.base, self.base.tok_embeddings(tokens), 0, self.first)

    @torch.no_grad()
    def forward_tree(self, tokens: torch.Tensor, start_pos: int, tree_mask: torch.Tensor, depth: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Verify-and-draft pass over R tree rows, batch 1.

        tokens [1, R] (row 0 = the last verified token at position start_pos), tree_mask
        [R, R] ancestor mask, depth [R]. Reads cache slots [0, start_pos), writes main K/V
        of all R rows into slots [start_pos, start_pos + R) (see `compact_cache_`).
        Returns (main hidden [R, d], stream hidden [R, g, d]) after the final norm.
        """
        base = self.base
        R = tokens.shape[1]
        pos = start_pos + depth
        main_mask = torch.cat([torch.ones(R, start_pos, dtype=torch.bool), tree_mask], 1)
        x = base.tok_embeddings(tokens)
        h_s = None
        for i, block in enumerate(base.layers):
            cache = block.attention.kv_cache
            if i == self.first and self.params is not None:
                h_s = self.params.enter(x)
            ctx_k, ctx_v = cache.k_cache[:, :start_pos], cache.v_cache[:, :start_pos]
            x_new, k, v = block_rows(base, block, self._main_lora(i), x, pos, ctx_k, ctx_v, main_mask)
            cache.k_cache[:, start_pos : start_pos + R] = k
            cache.v_cache[:, start_pos : start_pos + R] = v
            if h_s is not None:
                h_s = self._streams(h_s, i, pos, cache.k_cache[:, : start_pos + R], cache.v_cache[:, : start_pos + R], main_mask)
            x = x_new
        return base.norm(x)[0], (base.norm(h_s)[0] if h_s is not None else None)

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Causal pass over a prompt [1, T] at positions 0..T-1; returns hidden of the last row
        (main [d], streams [g, d]). The prompt's K/V is written to cache slots [0, T)."""
        T = tokens.shape[1]
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        main, streams = self.forward_tree(tokens, 0, mask, torch.arange(T))
        return main[-1], (streams[-1] if streams is not None else None)

    @torch.no_grad()
    def compact_cache_(self, start_pos: int, rows: list[int]) -> None:
        """Keep the K/V of tree rows `rows` (in order) at slots start_pos, start_pos+1, ..."""
        idx = torch.tensor(rows, dtype=torch.long) + start_pos
        for block in self.base.layers:
            c = block.attention.kv_cache
            c.k_cache[:, start_pos : start_pos + len(rows)] = c.k_cache[:, idx]
            c.v_cache[:, start_pos : start_pos + len(rows)] = c.v_cache[:, idx]


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def save_streams(path, params: StreamParams) -> None:
    """Write stream weights + their config (atomic)."""
    from dataclasses import asdict
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save({"msa_config": asdict(params.cfg), "state_dict": {k: v.detach().clone() for k, v in params.state_dict().items()}}, tmp)
    tmp.replace(path)


def load_streams(path, base: Transformer) -> StreamParams:
    """Stream weights written by `save_streams` (or `edgespec train`) for this base model.

    `path` is a file, or the bare name of a weights file shipped in `edgespec/weights`."""
    from pathlib import Path

    from edgespec.errors import EdgespecError

    path = Path(path)
    packaged = Path(__file__).resolve().parent.parent / "weights" / path.name
    if not path.is_file() and path.parent == Path(".") and packaged.is_file():
        path = packaged  # a file name alone may name weights shipped with edgespec
    if not path.is_file():
        raise EdgespecError(f"stream weights '{path}' not found (train them with `edgespec train`, or name a file shipped in edgespec/weights)")
    try:
        blob = torch.load(path, weights_only=True)
        params = StreamParams(base, MSAConfig(**blob["msa_config"]))
        params.load_state_dict(blob["state_dict"])
    except EdgespecError:
        raise
    except Exception as e:
        raise EdgespecError(f"stream weights '{path}' do not fit this model: {e}") from None
    return params.requires_grad_(False)
