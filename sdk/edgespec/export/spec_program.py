"""Speculative Streaming as a program method: one call per step verifies the previous
draft and drafts the next. The program has two methods sharing one KV cache (same buffer
names, lowered with shared mutable buffers): `forward` (the main stream, autoregressive,
dynamic length: it prefills prompts) and `spec_step`.

A prompt is prefilled by `forward` (as in autoregressive decoding); the first `spec_step`
starts from the first generated token with a placeholder draft and produces the first real
draft. So there is no separate drafting prefill method:
every method carries its own packed copy of the weights in ExecuTorch's XNNPACK runtime
(no weight cache in the pip build: +100 MB resident per 8da4w method, measured), and a
third method would push the speculative program's memory past the autoregressive one's
by a third instead of a sixth.

step(last, draft, input_pos, temperature, uniforms, gumbel) -> (tokens, n, next draft)
 1. tree rows: the last emitted token (root, at input_pos) and the draft's candidates,
    placed by the static tree; one pass of the base model over the R rows with the tree's
    ancestor mask writes their K/V at [input_pos, input_pos + R).
 2. the lm head on the R rows only, acceptance inside the program (`accept_tree`).
 3. KV compaction: the accepted path's K/V moved to consecutive slots (index copy; a chain
    tree needs none).
 4. the streams of the last accepted node only: D rows through the top MSA layers at the
    slots right after the accepted prefix. With the prefix compacted, "main keys up to t and
    stream rows i <= j" is exactly causal attention there, so ExecuTorch's causal SDPA does
    it; those slots are overwritten by the next call's tree rows. lm head on D rows, top-k.
Outputs are a few ids: never full-vocabulary logits per tree node.
"""

from __future__ import annotations

import torch
from torch import nn

from edgespec.export import constants as C
from edgespec.speculative.streams import SpecModel
from edgespec.speculative.tree import Tree, placeholder_draft
from edgespec.speculative.accept import accept_tree


class SpecProgram(nn.Module):
    """The methods of a speculative program over a `SpecModel` with a fixed tree."""

    def __init__(self, model: SpecModel, tree: Tree):
        super().__init__()
        if model.params is None:
            raise ValueError("a speculative program needs stream parameters")
        if len(tree.branching) > model.cfg.gamma:
            raise ValueError(f"tree depth {len(tree.branching)} exceeds the {model.cfg.gamma} trained streams")
        self.base, self.streams = model.base, model.params
        self.first, self.shared = model.first, model.cfg.mode == "shared"
        self.tree, self.depth, self.k = tree, len(tree.branching), tree.k_max
        children, valid = tree.children_table()
        self.register_buffer("tree_children", children, persistent=False)
        self.register_buffer("tree_valid", valid, persistent=False)
        self.register_buffer("node_depth", torch.tensor(tree.depth, dtype=torch.long), persistent=False)
        self.register_buffer("fill_index", tree.fill_index(), persistent=False)
        self.register_buffer("tree_visible", tree.ancestor_mask(), persistent=False)

    @property
    def max_seq_len(self) -> int:
        return self.base.args.max_seq_len

    def _main(self, tokens: torch.Tensor, start_pos, positions: torch.Tensor, mask: torch.Tensor | None, per_row: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Base model over rows tokens [1, T] at `positions` [T]; K/V to [start_pos, start_pos + T).
        Returns (input of the first MSA layer [T, d], final-norm hidden [T, d])."""
        base = self.base
        cos, sin = base.rope_cos.index_select(0, positions), base.rope_sin.index_select(0, positions)
        x = base.tok_embeddings(tokens)
        h0 = x
        for i, layer in enumerate(base.layers):
            if i == self.first:
                h0 = x
            lora = self.streams.lora[i - self.first] if self.shared and i >= self.first else None
            x = layer(x, start_pos, cos, sin, lora, mask, per_row)
        return h0[0], base.norm(x)[0]

    def _draft(self, h0: torch.Tensor, start_pos) -> torch.Tensor:
        """Streams of one main row h0 [d] (its position is start_pos - 1): [D, k] candidates."""
        base = self.base
        x = self.streams.enter(h0)[: self.depth][None]  # [1, D, d]
        positions = torch.arange(self.depth) + start_pos
        cos, sin = base.rope_cos.index_select(0, positions), base.rope_sin.index_select(0, positions)
        for i in range(self.first, base.args.n_layers):
            x = base.layers[i](x, start_pos, cos, sin, self.streams.lora[i - self.first], None, True)
        logits = base.output(base.norm(x)[0])  # [D, V]
        if self.k == 1:  # a chain: argmax is a cheaper scan than top-k
            return logits.argmax(-1, keepdim=True)
        return logits.topk(self.k, -1).indices

    def _check_pos(self, start_pos, rows: int) -> None:
        torch._check(start_pos >= 0)
        torch._check(start_pos + rows <= self.max_seq_len)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """The main stream, autoregressively: tokens [1, T] at input_pos [1] -> logits of the
        last row [1, V] fp32. In Lossless mode this is the base model; in Shared mode the
        main rows use the fine-tuned adapters, as in spec_step."""
        T = tokens.shape[1]
        start = input_pos[0].item()
        self._check_pos(start, T)
        _, h = self._main(tokens, start, torch.arange(T) + start, None, False)
        return self.base.output(h[-1:]).float()

    def step(
        self,
        last: torch.Tensor,
        draft: torch.Tensor,
        input_pos: torch.Tensor,
        temperature: torch.Tensor,
        uniforms: torch.Tensor,
        gumbel: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Verify the previous draft and draft the next (see module docstring).

        last [1] the last emitted token (not yet in the cache, at position input_pos [1]);
        draft [D, k]; temperature [1] (<= 0 greedy); uniforms [R, k]; gumbel [V].
        Returns (tokens [D + 1] emitted, valid up to n; n [1]; next draft [D, k]).
        The caller advances its position by n.
        """
        R = self.tree.size
        pos = input_pos[0].item()
        self._check_pos(pos, R + self.depth)
        torch._check(pos >= 0)
        nodes = torch.cat([last, draft.reshape(-1).index_select(0, self.fill_index)])  # [R]
        if self.tree.is_chain:  # a line: causal attention is tree attention
            mask = None
        else:  # context fully visible, tree rows see their ancestors: [R, pos + R] additive
            rel = torch.arange(pos + R) - pos  # key slot relative to the root
            visible = (rel < 0) | self.tree_visible.index_select(1, rel.clamp(min=0))
            mask = torch.zeros(visible.shape).masked_fill(~visible, float("-inf"))
        h0, h = self._main(nodes[None], pos, self.node_depth + pos, mask, True)
        logits = self.base.output(h).float()  # [R, V]
        path, n, tokens = accept_tree(self.tree_children, self.tree_valid, self.depth, nodes, logits, temperature, uniforms, gumbel)
        if not self.tree.is_chain:
            rows = path + pos  # [D + 1]; slots past n get copies, overwritten next call
            for layer in self.base.layers:
                cache = layer.attention.kv_cache
                for buf in (cache.k_cache, cache.v_cache):
                    torch.ops.llama.update_cache(buf.index_select(1, rows), buf, pos)
        last_node = path.index_select(0, n - 1)  # [1]
        accepted = n[0].item()
        torch._check(accepted >= 1)
        torch._check(accepted <= self.depth + 1)
        nxt = pos + accepted
        return tokens, n, self._draft(h0.index_select(0, last_node)[0], nxt)


class _Method(nn.Module):
    """Exposes one method of a SpecProgram as `forward`, keeping the buffer names shared."""

    def __init__(self, program: SpecProgram, name: str):
        super().__init__()
        self.program, self.name = program, name

    def forward(self, *args):
        return getattr(self.program, self.name)(*args)


def example_step_inputs(program: SpecProgram) -> tuple[torch.Tensor, ...]:
    R, D, k, V = program.tree.size, program.depth, program.k, program.base.args.vocab_size
    return (
        torch.zeros(1, dtype=torch.long),
        placeholder_draft(D, k),
        torch.ones(1, dtype=torch.long),
        torch.zeros(1),
        torch.full((R, k), 0.5),
        torch.zeros(V),
    )


def export_spec_methods(program: SpecProgram) -> dict[str, torch.export.ExportedProgram]:
    """`torch.export` of forward (autoregressive, dynamic length) and spec_step."""
    seq = torch.export.Dim("seq_len", min=1, max=program.max_seq_len - 1)
    tokens, pos = torch.zeros((1, 4), dtype=torch.long), torch.zeros((1,), dtype=torch.long)
    out = {}
    with torch.no_grad():
        out[C.FORWARD] = torch.export.export(_Method(program, "forward"), (tokens, pos), dynamic_shapes=(({1: seq}, None),), strict=False)
        out[C.SPEC_STEP] = torch.export.export(_Method(program, "step"), example_step_inputs(program), strict=False)
    return out


def spec_meta(program: SpecProgram):
    from edgespec.export.program import SpecMeta

    return SpecMeta(program.tree.branching, program.tree.parents, program.streams.cfg.gamma, not program.shared)


class EagerSpecMethods:
    """The `SpecMethods` of a SpecProgram run eagerly (same code the program is exported from)."""

    def __init__(self, program: SpecProgram):
        self.program = program
        self.depth, self.topk, self.tree_size = program.depth, program.k, program.tree.size
        self.vocab_size = program.base.args.vocab_size

    @torch.no_grad()
    def spec_step(self, last: int, draft, pos: int, temperature: float, uniforms, gumbel) -> tuple[list[int], torch.Tensor]:
        toks, n, nxt = self.program.step(torch.tensor([last]), draft, torch.tensor([pos]), torch.tensor([temperature]), uniforms, gumbel)
        return toks[: int(n)].tolist(), nxt

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, start_pos: int) -> torch.Tensor:
        return self.program(tokens, torch.tensor([start_pos]))[0]
