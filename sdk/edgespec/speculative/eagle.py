"""An EAGLE-style drafter: one decoder layer of its own that reads the whole context.

Heads (Medusa, Hydra) see one hidden state; this drafter attends over features of every
earlier position, like EAGLE (Li et al., 2024) with EAGLE-3's fused features and
training-time test:

- features: f_t = [x_a(t) ; x_b(t) ; x_c(t)], the inputs of a low and a middle layer and the
  top layer's output (pre-norm) at position t, fused as g_t = W_f f_t (3d -> d);
- the draft layer's row at position p reads (g_{p-1}, e(x_p)) as u_p = W_in [e(x_p) ; g_{p-1}]
  (2d -> d), runs one decoder block (`TransformerBlock`, its own KV cache), and its output
  a_p predicts x_{p+1} through norm + the drafting head (g_{-1} = 0 at p = 0);
- drafting depth 1 after the last accepted row t reads (g_t, bonus x_{t+1}) at position t+1;
  depth j > 1 reads (a of depth j-1, its draft) one position further: the drafter's own
  output stands in for the feature it cannot know.

Training (`forward_train`) is teacher forcing with training-time test: pass 1 runs the layer
over (g_{p-1}, x_p) for every p; pass j > 1 over (a^{(j-1)}_{p-1}, x_p), where a row of pass j
at p sees pass-1 keys at positions <= p - j + 1 and the pass-i row at p - j + i (1 < i <= j):
exactly the keys a depth-j drafting row has in the program. With a chain tree the replay of
acceptance from these passes is exact (a depth is reached only when every draft before it
was the true token).

In the program (`edgespec.speculative.step.SpecProgram`) `prefill` writes the draft layer's
cache for prompt rows and `draft` writes it for the accepted rows, then drafts `depth` tokens
one row at a time. The fused feature of each row is kept per position (`g_store`, a cache
like the KV cache) so the next call can read g of the row before its first.
"""

from __future__ import annotations

import torch
from torch import nn

from edgespec.config import DrafterConfig
from edgespec.models.llama import GrowingKV, KVCache, RMSNorm, Transformer, TransformerBlock
from edgespec.quant import QuantPolicy
from edgespec.speculative.common import draft_positions, frozen_layers


def feature_taps(n_layers: int) -> tuple[int, int, int]:
    """Layers whose inputs make the fused feature: a low one, the middle one, and n_layers
    (the top layer's output), as EAGLE-3 fuses low-, mid- and high-level features."""
    return (min(2, n_layers // 2), n_layers // 2, n_layers)


def pass_mask(T: int, j: int) -> torch.Tensor:
    """[T, j*T] bool: which keys a row of pass j (1-based) at position p sees among the keys of
    passes 1..j (pass-major): pass 1 at positions <= p - j + 1, pass i > 1 at p - j + i."""
    p = torch.arange(T)[:, None]
    k = torch.arange(T)[None, :]
    blocks = [k <= p - j + 1] + [k == p - j + i for i in range(2, j + 1)]
    return torch.cat(blocks, 1)


class EagleLayer(nn.Module):
    """The drafter's trained parameters: the feature fusion, the input map (each input
    RMS-normalized), one decoder block (its own KV cache) and its final norm. The block and
    norm start as copies of the base model's top layer and final norm, the fusion as the top
    feature alone, the input map as the sum of token and feature."""

    # a decoder layer of its own, quantized like the base model: in fp32 its weights, read once
    # per drafting call, cost as many bytes as a quarter of the 8da4w base model
    quant_policy = QuantPolicy()
    store_dtype = torch.bfloat16  # its weights file (5.2M parameters for SmolLM2-135M: 10 MB, not 21); trained under bf16 autocast

    def __init__(self, base: Transformer):
        super().__init__()
        a = base.args
        d = a.dim
        # every input is RMS-normalized first: the taps' scales differ by 10-1000x (the
        # middle layer's first position reaches 2e4) and the embedding's rms is ~0.1
        self.tap_norms = nn.ModuleList(RMSNorm(d, a.norm_eps) for _ in range(3))
        self.fuse = nn.Linear(3 * d, d, bias=False)  # W_f: [low ; mid ; top] -> g
        self.e_norm, self.g_norm = RMSNorm(d, a.norm_eps), RMSNorm(d, a.norm_eps)
        self.inp = nn.Linear(2 * d, d, bias=False)  # W_in: [e(x) ; g] -> u
        self.block = TransformerBlock(a)
        self.norm = RMSNorm(d, a.norm_eps)
        self.g_store = KVCache.zeros(a.max_seq_len, 1, d)  # g_t per position (k); v unused
        with torch.no_grad():
            self.block.load_state_dict(base.layers[-1].state_dict())
            self.norm.weight.copy_(base.norm.weight)
            eye = torch.eye(d)
            self.fuse.weight.zero_()
            self.fuse.weight[:, 2 * d :] = eye  # g starts as the (normalized) top feature
            self.inp.weight.copy_(torch.cat([eye, eye], 1))  # u starts as token + feature

    def fused(self, feats: torch.Tensor) -> torch.Tensor:
        """g = W_f [n(low) ; n(mid) ; n(top)]: features [..., 3d] -> [..., d]."""
        taps = feats.to(self.norm.weight.dtype).chunk(3, -1)  # (fuse may be a BlockLinear: no .weight)
        return self.fuse(torch.cat([n(t) for n, t in zip(self.tap_norms, taps, strict=True)], -1))

    def enter(self, e: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """u = W_in [n(e) ; n(g)]: [..., d], [..., d] -> [..., d]."""
        return self.inp(torch.cat([self.e_norm(e), self.g_norm(g.to(e.dtype))], -1))


class EagleModel(nn.Module):
    """Frozen base + an EAGLE-style draft layer: a `edgespec.speculative.drafters.Drafter`."""

    chains_only = True  # depth j continues the top-1 of depth j - 1

    def __init__(self, base: Transformer, params: EagleLayer, cfg: DrafterConfig):
        super().__init__()
        self.base, self.params, self.cfg = base, params, cfg
        self.taps = feature_taps(base.args.n_layers)
        self.first = base.args.n_layers  # no base layer runs for drafting rows
        self.draft_layers = 1

    def main_lora(self, i: int) -> None:
        return None  # lossless: main rows are the untouched base model

    @torch.no_grad()
    def lower_hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """Features f [B, T, 3d] of teacher-forced tokens [B, T] (frozen; cacheable)."""
        x, out, prev = self.base.embed(tokens), [], 0
        for t in self.taps:
            x = frozen_layers(self.base, x, prev, t) if t > prev else x
            out.append(x)
            prev = t
        return torch.cat(out, -1)

    def _layer(self, u: torch.Tensor, start_pos, positions: torch.Tensor, mask=None, kv=None) -> torch.Tensor:
        cos, sin = self.base.rope(positions)
        return self.params.block(u, start_pos, cos, sin, None, mask, kv)

    def forward_train(
        self, tokens: torch.Tensor, h0: torch.Tensor | None = None, start: int | torch.Tensor = 0, length: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing with training-time test (module docstring). tokens [B, T], h0 the
        features [B, T, 3d]. Returns (None in place of the main hidden: lossless, the base is
        not run; drafting rows' lm-head inputs [B, L, g, d] at `draft_positions`: row (t, j)
        predicts token t + 2 + j)."""
        p = self.params
        B, T = tokens.shape
        if h0 is None:
            h0 = self.lower_hidden(tokens)
        depth = self.cfg.draft_depth
        e = self.base.embed(tokens).detach()  # [B, T, d]
        g = p.fused(h0)  # [B, T, d]
        feat = torch.cat([torch.zeros_like(g[:, :1]), g[:, :-1]], 1)  # g_{p-1}, 0 at p = 0
        bk = p.block.attention
        kv = GrowingKV.empty(B, bk.n_kv_heads, bk.head_dim, e.dtype)
        positions = torch.arange(T)
        outs = []
        for j in range(1, depth + 1):
            a = self._layer(p.enter(e, feat), 0, positions, pass_mask(T, j), kv)  # [B, T, d]
            outs.append(a)
            feat = torch.cat([torch.zeros_like(a[:, :1]), a[:, :-1]], 1)
        rows, _ = draft_positions(start, B, T, length)  # [B, L]
        # depth j (1-based) at row t is pass j's output at position t + j
        idx = (rows[:, :, None] + torch.arange(1, depth + 1)).clamp(max=T - 1)  # [B, L, g]
        return None, p.norm(_pick_pass(torch.stack(outs, 2), idx))

    # -- in the program --------------------------------------------------------------------

    def _g_before(self, start_pos: torch.Tensor) -> torch.Tensor:
        """g of the row before position start_pos [1] (zero at 0): [1, d]."""
        store = self.params.g_store.k_cache  # [1, S, 1, d]
        g = store.index_select(1, (start_pos - 1).clamp(min=0))[0, :, 0]
        return g * (start_pos > 0).to(g.dtype)

    def _write(self, feats: torch.Tensor, tokens: torch.Tensor, g_prev: torch.Tensor, start_pos, rows: int) -> torch.Tensor:
        """Draft-layer rows for `rows` positions start_pos..: features feats [rows, 3d] of
        those positions, tokens [rows] at them; g of the position before (g_prev [1, d]).
        Writes the g store and the layer's cache; returns the layer outputs [rows, d]."""
        p = self.params
        g = p.fused(feats)  # [rows, d]
        p.g_store.update(start_pos, g[None, :, None], g[None, :, None])
        prev = torch.cat([g_prev, g], 0).narrow(0, 0, rows)  # [rows, d]: g of the position before each
        u = p.enter(self.base.embed(tokens), prev)[None]
        return self._layer(u, start_pos, torch.arange(rows) + start_pos)[0]

    def prefill(self, feats: torch.Tensor, tokens: torch.Tensor, input_pos: torch.Tensor, start_pos) -> None:
        """The draft layer's cache for prompt rows tokens [T] at start_pos.. (features feats [T, 3d])."""
        self._write(feats, tokens, self._g_before(input_pos), start_pos, tokens.shape[0])

    def draft(self, v, depth: int, head) -> torch.Tensor:
        """The next draft [depth, k] (`edgespec.speculative.step.Verified` v): the draft layer
        over the D + 2 rows at pos.. (the root's token, then each emitted token, reading g of
        the row before: the previous call's last accepted row, then the path's rows), then
        `depth` drafting rows one after the other from row pos + n (the last accepted row's g
        and the bonus token). Rows past pos + n hold what the next call overwrites."""
        toks = torch.cat([v.root, v.tokens])  # [D + 2]
        feats = v.feats.index_select(0, v.path)  # [D + 1, 3d] at pos..pos + D
        feats = torch.cat([feats, torch.zeros_like(feats[:1])])  # position pos + D + 1: not known yet
        a = self._write(feats, toks, self._g_before(v.input_pos), v.pos, toks.shape[0])  # [D + 2, d]
        p = self.params
        s = a.index_select(0, v.n)  # [1, d]: row pos + n -> depth 1
        out = []
        for j in range(depth):
            ids = head(p.norm(s))  # [1, k]
            out.append(ids)
            if j + 1 < depth:
                at = v.start_pos + j + 1
                u = p.enter(self.base.embed(ids[:, 0]), s)[None]
                s = self._layer(u, at, torch.arange(1) + at)[0]
        return torch.cat(out, 0)


def _pick_pass(stacked: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """out[b, l, j] = stacked[b, idx[b, l, j], j]: stacked [B, T, g, d], idx [B, L, g]."""
    B, T, g, d = stacked.shape
    flat = stacked.permute(0, 2, 1, 3).reshape(B, g * T, d)  # [B, g*T, d], pass-major
    at = idx + (torch.arange(g) * T)  # [B, L, g]
    return flat.gather(1, at.reshape(B, -1, 1).expand(-1, -1, d)).view(*idx.shape, d)
