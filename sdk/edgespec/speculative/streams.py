"""Multi-stream attention (Speculative Streaming) over a loaded `Transformer`.

The top `n_layers` of the base model become MSA layers. Besides the main stream there
are gamma (`drafter.draft_depth`) speculative streams; stream j at position t predicts the
token j steps after the main stream's next token. Streams enter at layer L0 = N - n_layers as

    S[t, j] = f(M[t]) + P[j]                 f = identity, or identity + rank-eta map

and in every MSA layer a stream row (t, j) attends to the main stream's keys/values at
positions visible from t and to the stream rows (t, i <= j). Only main rows are written
to the KV cache: streams add none.

Modes
- lossless: adapters (stream LoRA, f, P) touch only stream rows; the main stream runs the
  untouched base weights, so the main stream's output is the base model's.
- shared: the LoRA adapters apply to main rows as well and are fine-tuned with them.

Every row, main or stream, runs through the model's one decoder block
(`edgespec.models.llama.TransformerBlock`): teacher-forced training here (`forward_train`,
explicit masks, no cache) and decoding in `edgespec.speculative.step` (static cache).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from edgespec.config import DrafterConfig
from edgespec.models.llama import SDPA, GrowingKV, Transformer, attention_op, linear_shapes
from edgespec.quant import QuantPolicy
from edgespec.speculative.common import draft_positions, frozen_layers


class LoRA(nn.Module):
    """x -> B(A x) * scale; B starts at zero so an untrained adapter is the identity map."""

    def __init__(self, d_in: int, d_out: int, rank: int, alpha: float | None = None):
        super().__init__()
        self.A = nn.Parameter(torch.randn(rank, d_in) / math.sqrt(d_in))
        self.B = nn.Parameter(torch.zeros(d_out, rank))
        self.scale = (alpha or rank) / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(x, self.A), self.B) * self.scale


class StreamParams(nn.Module):
    """Every trained parameter of Speculative Streaming (a few hundred KB to a few MB)."""

    quant_policy = QuantPolicy(weights="float")  # small adapters: they follow the activations' dtype

    def __init__(self, base: Transformer, cfg: DrafterConfig):
        super().__init__()
        a = base.args
        self.cfg = cfg
        self.stream_emb = nn.Parameter(torch.randn(cfg.draft_depth, a.dim) * 0.02)  # P_j
        self.f = nn.Sequential(nn.Linear(a.dim, cfg.f_rank, bias=False), nn.Linear(cfg.f_rank, a.dim, bias=False)) if cfg.f_rank else None
        if self.f is not None:
            nn.init.zeros_(self.f[1].weight)
        self.lora = nn.ModuleList()
        for _ in range(min(cfg.n_layers, a.n_layers)):  # the top n_layers
            if cfg.lora_rank:
                self.lora.append(nn.ModuleDict({n: LoRA(d_in, d_out, cfg.lora_rank) for n, (d_in, d_out) in linear_shapes(a).items()}))
            else:
                self.lora.append(nn.ModuleDict())

    def entry_parameters(self) -> list[nn.Parameter]:
        """The streams' entry (P_j and f): parameters no main row uses, in either mode
        (`train.entry_lr` sets their learning rate)."""
        return [self.stream_emb, *(self.f.parameters() if self.f is not None else ())]

    def enter(self, h: torch.Tensor) -> torch.Tensor:
        """Stream inputs from main hidden states: [..., d] -> [..., gamma, d]."""
        if self.f is not None:
            h = h + self.f(h)
        return h.unsqueeze(-2) + self.stream_emb


def stream_mask(main_mask: torch.Tensor, gamma: int) -> torch.Tensor:
    """Mask of stream rows (t, j), flattened t-major: [T*g, Tk + T*g] from main_mask [T, Tk]
    (or [B, 1, T*g, Tk + T*g] from one per sequence, [B, 1, T, Tk]).

    Row (t, j) sees the main keys row t of main_mask sees, and stream rows (t, i <= j).
    """
    T = main_mask.shape[-2]
    own = torch.tril(torch.ones(gamma, gamma, dtype=torch.bool))
    block_diag = torch.block_diag(*([own] * T)) if T else torch.zeros(0, 0, dtype=torch.bool)
    main = main_mask.repeat_interleave(gamma, -2)
    return torch.cat([main, block_diag.expand(*main.shape[:-2], *block_diag.shape)], -1)


class StreamSDPA(SDPA):
    """The stream rows' attention in teacher forcing, computed from its structure.

    Stream rows (t, j), t-major (q [B, R, H, D], R = Tq g rows for Tq positions), see some
    main keys and the stream rows (t, i <= j): keys [B, T + R, Hkv, D], the T main rows first.
    `mask` is such a stream mask (`stream_mask`; [R, T + R], or per sequence [B, 1, R, T + R]):
    its main part is read from the rows (t, 0), its stream part must be the block-diagonal
    lower triangle. A dense masked attention scores all T + R keys per row, this T + g. Main
    rows (mask None) are causal attention as in `SDPA`."""

    def __init__(self, gamma: int):
        super().__init__()
        self.gamma = gamma

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start_pos, mask: torch.Tensor | None) -> torch.Tensor:
        if mask is None:
            return super().forward(q, k, v, start_pos, None)
        B, R, H, D = q.shape
        g, Hkv = self.gamma, k.shape[2]
        T, Tq = k.shape[1] - R, R // g  # main positions, positions with stream rows
        if mask.shape[-2:] != (R, T + R) or Tq * g != R:
            raise ValueError(f"stream attention: mask {tuple(mask.shape)} is not the stream mask of {Tq} positions x {g} streams over {T} main keys")
        see_main = mask[..., ::g, :T].reshape(-1, 1, 1, Tq, 1, T)  # [B or 1, 1, 1, Tq, 1, T]
        G = H // Hkv
        qs = q.view(B, Tq, g, Hkv, G, D).permute(0, 3, 4, 1, 2, 5)  # [B, Hkv, G, Tq, g, D]
        km, vm = (x[:, :T].permute(0, 2, 1, 3) for x in (k, v))  # [B, Hkv, T, D]
        ks, vs = (x[:, T:].reshape(B, Tq, g, Hkv, D).permute(0, 3, 1, 2, 4) for x in (k, v))  # [B, Hkv, Tq, g, D]
        scale = D**-0.5
        s_main = torch.einsum("bhntjd,bhsd->bhntjs", qs, km) * scale  # [B, Hkv, G, Tq, g, T]
        s_own = torch.einsum("bhntjd,bhtid->bhntji", qs, ks) * scale  # [B, Hkv, G, Tq, g, g]
        see_own = torch.tril(torch.ones(g, g, dtype=torch.bool))  # [g, g]: i <= j
        scores = torch.cat([s_main.masked_fill(~see_main, float("-inf")), s_own.masked_fill(~see_own, float("-inf"))], -1)
        w = torch.softmax(scores.float(), -1).to(q.dtype)
        y = torch.einsum("bhntjs,bhsd->bhntjd", w[..., :T], vm) + torch.einsum("bhntji,bhtid->bhntjd", w[..., T:], vs)
        return y.permute(0, 3, 4, 1, 2, 5).reshape(B, R, H, D)


class StreamsModel(nn.Module):
    """The streams drafter, a `edgespec.speculative.drafters.Drafter`: a base `Transformer`
    plus the streams' parameters (`StreamParams`). The base weights are never modified.

    Training runs `forward_train` (teacher forcing, no cache); decoding runs the same blocks
    through `edgespec.speculative.step.SpecProgram` (static cache, one call per step)."""

    def __init__(self, base: Transformer, params: StreamParams):
        super().__init__()
        self.base = base
        self.params = params
        self.cfg = params.cfg
        self.first = base.args.n_layers - self.cfg.n_layers
        self.taps = (self.first,)  # the program keeps the input of layer L0 for drafting rows
        self.draft_layers = base.args.n_layers - self.first  # layers a drafting row runs through
        self.chains_only = False  # tune: every tree's acceptance is replayed exactly

    def main_lora(self, i: int) -> nn.ModuleDict | None:
        """Adapters of layer i on main-stream rows: Shared mode only (Lossless: none)."""
        return self.stream_lora(i) if self.cfg.mode == "shared" and i >= self.first else None

    def stream_lora(self, i: int) -> nn.ModuleDict:
        """Adapters of MSA layer i (i >= first) on stream rows."""
        return self.params.lora[i - self.first]

    def forward_train(
        self, tokens: torch.Tensor, h0: torch.Tensor | None = None, start: int | torch.Tensor = 0, length: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced pass. tokens [B, T]; h0 optional cached input of layer L0 [B, T, d].
        Stream rows only for `length` positions start, start + 1, .. of each sequence (an int,
        or one per sequence [B]: earlier positions, e.g. the prompt's, have no target; main
        rows always cover all T, their keys are what the streams attend to).

        Returns (main final hidden [B, T, d], stream final hidden [B, L, g, d]), both after
        the final norm (apply `base.output` for logits); stream row i of sequence b is
        position start_b + i (`edgespec.speculative.common.draft_positions`: L = length or T - min(start); rows past
        T - 1 repeat position T - 1).
        """
        base = self.base
        B, T = tokens.shape
        if h0 is None:
            h0 = self.lower_hidden(tokens)
        g = self.cfg.draft_depth
        rows, _ = draft_positions(start, B, T, length)  # [B, L]
        L = rows.shape[1]
        N = base.args.n_layers
        pos = torch.arange(T)
        cos, sin = base.rope(pos)
        spos = (rows[:, :, None] + torch.arange(1, g + 1)).reshape(B, L * g)  # stream j sits j steps ahead
        scos, ssin = (c.view(B, L * g, -1) for c in base.rope(spos.flatten()))  # [B, L*g, D]
        see = pos[None, None, :] <= rows[:, :, None]  # [B, L, T]: main keys s <= t
        smask = stream_mask(see[:, None], g)  # [B, 1, L*g, T + L*g]
        h_in = h0.gather(1, rows[:, :, None].expand(B, L, h0.shape[-1]))
        h_s = self.params.enter(h_in).reshape(B, L * g, -1)
        main_kvs = base.new_kvs(B, cos.dtype)
        x = base.run_layers(h0, self.first, N, 0, cos, sin, self.main_lora, kvs=main_kvs)  # causal; each layer keeps its K/V
        with attention_op(base, StreamSDPA(g)):  # the stream mask's structure, not a dense mask
            h_s = base.run_layers(h_s, self.first, N, 0, scos, ssin, self.stream_lora, smask, [GrowingKV(kv.k, kv.v) for kv in main_kvs])
        return base.norm(x), base.norm(h_s).view(B, L, g, -1)

    @torch.no_grad()
    def lower_hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """Input of layer L0 for teacher forcing (the frozen part; cacheable). [B, T, d]."""
        return frozen_layers(self.base, self.base.embed(tokens), 0, self.first)

    def prefill(self, feats, tokens, input_pos, start_pos) -> None:
        return None  # streams keep no state of their own between calls

    def draft(self, v, depth: int, head) -> torch.Tensor:
        """The next draft [depth, k] (`edgespec.speculative.step.Verified` v): `head` (the
        program's drafting head) over `draft_hidden`."""
        return head(self.draft_hidden(v.feats, v.h, v.last, v.start_pos, depth))

    def draft_hidden(self, h0: torch.Tensor, h: torch.Tensor | None, last: torch.Tensor, start_pos, depth: int) -> torch.Tensor:
        """Final-norm hidden states [depth, d] of the drafting rows after main row `last` [1]
        of h0 [R, d] (layer-L0 inputs; the row's position is start_pos - 1; the final hidden
        states h are not used by streams). The stream rows sit at cache slots start_pos.. and attend causally:
        the main stream's keys up to the row, then streams i <= j, exactly the stream mask
        once the accepted path is compacted. Their K/V land in slots the next call overwrites."""
        base = self.base
        x = self.params.enter(h0.index_select(0, last)[0])[:depth][None]  # [1, D, d]
        cos, sin = base.rope(torch.arange(depth) + start_pos)
        x = base.run_layers(x, self.first, base.args.n_layers, start_pos, cos, sin, self.stream_lora)
        return base.norm(x)[0]


@torch.no_grad()
def merged_main_model(model: StreamsModel) -> Transformer:
    """What a Shared model's main stream computes, as one plain `Transformer`: a copy of the
    base whose adapted linears are W + scale * B A (fp32; the base itself is left as it is).
    The fine-tuned model as a reference (answers, fidelity) for its program; a Lossless
    model's main stream is the base, returned as a copy too."""
    import copy

    base = copy.deepcopy(model.base)
    for i, layer in enumerate(base.layers):
        adapters = model.main_lora(i)
        if not adapters:
            continue
        if getattr(layer.attention, "fused", None) is not None or getattr(layer.feed_forward, "fused", None) is not None:
            raise ValueError("merged_main_model: the base's projections are fused (an export transform); merge before fusing")
        for name, lora in adapters.items():
            linear = getattr(layer.attention if name in ("wq", "wk", "wv", "wo") else layer.feed_forward, name)
            linear.weight += lora.scale * (lora.B @ lora.A).to(linear.weight.dtype)
    return base
