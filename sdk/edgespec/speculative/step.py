"""The speculative step: one call verifies the previous draft and drafts the next.

The same module is run eagerly (`EagerSpecMethods`: the reference decoder of tests, `tune`
and the benchmarks) and exported as the program's `spec_step` and `forward` methods
(`edgespec.export.spec_program`), so what is measured on the host is what ships.

step(last, draft, input_pos, temperature, uniforms, gumbel) -> (tokens, n, next draft)
 1. tree rows: the last emitted token (root, at input_pos) and the draft's candidates,
    placed by the static tree; one pass of the base model over the R rows with the tree's
    ancestor mask writes their K/V at [input_pos, input_pos + R).
 2. the lm head on the R rows only, acceptance inside the step (`accept_tree`).
 3. KV compaction: the accepted path's K/V moved to consecutive slots (index copy; a chain
    tree needs none).
 4. the next draft from the last accepted node only (`draft` of the drafting model: the
    streams' D rows through the top MSA layers at the slots right after the accepted
    prefix, Medusa heads on its final hidden state, or Hydra heads one depth after the
    other from it and the emitted token), through the drafting head: the lm head over the
    draft vocabulary when one is given (`speculative/vocab.py`), top-k.
Outputs are a few ids: never full-vocabulary logits per tree node.

The drafting model is a `edgespec.speculative.drafters.Drafter` (`base`, `taps`: the
layers whose inputs it reads as features, `prefill`, `cfg.draft_depth`, `params`: None when nothing is drafted and the
host fills the draft, e.g. prompt lookup, `main_lora(i)`, `draft(...)`): `StreamsModel`
(streams), `MedusaModel` or `HydraModel` (heads), `EagleModel`, or `NoDrafter` (the host drafts).
"""

from __future__ import annotations

import torch
from torch import nn

from edgespec.errors import EdgespecError
from edgespec.models.llama import additive_mask
from edgespec.speculative.accept import accept_tree
from edgespec.speculative.drafters import Drafter, Verified
from edgespec.speculative.tree import Tree, placeholder_draft
from edgespec.speculative.vocab import DraftHead


class SpecProgram(nn.Module):
    """The methods of a speculative program over a drafting model with a fixed tree."""

    def __init__(self, model: Drafter, tree: Tree, draft_ids: torch.Tensor | None = None):
        """draft_ids [N]: the draft vocabulary (full-vocabulary ids) of the drafting rows'
        lm head; None = the base model's full head."""
        super().__init__()
        if model.params is not None and len(tree.branching) > model.cfg.draft_depth:
            raise EdgespecError(
                f"tree depth {len(tree.branching)} exceeds the drafter's trained depth {model.cfg.draft_depth}; use a tree of at most {model.cfg.draft_depth} levels"
            )
        # the modules once each (`base.*`, `streams.*`: the names in the program); the drafting
        # model's behaviour as bound methods, not as a second owner of the same modules (a
        # mutated KV cache reachable under two names does not export)
        self.base, self.streams, self.cfg = model.base, model.params, model.cfg
        self.main_lora, self.draft_with = model.main_lora, model.draft
        self.taps = model.taps
        self.prefill = model.prefill
        self.draft_head = None if draft_ids is None else DraftHead(model.base.output.weight, draft_ids)
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

    def _main(self, tokens: torch.Tensor, start_pos, positions: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Base model over rows tokens [1, T] at `positions` [T]; K/V to [start_pos, start_pos + T).
        Returns (the drafter's features: the inputs of its `taps` layers, concatenated
        [T, d * len(taps)]; final-norm hidden [T, d])."""
        base = self.base
        cos, sin = base.rope(positions)
        x, feats, prev = base.embed(tokens), [], 0
        for t in (*self.taps, base.args.n_layers):
            x = base.run_layers(x, prev, t, start_pos, cos, sin, self.main_lora, mask)
            feats.append(x)
            prev = t
        return torch.cat(feats[:-1], -1)[0], base.norm(x)[0]

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The drafting head: top-k token ids [m, k] of drafting rows hidden [m, d]."""
        if self.draft_head is not None:
            return self.draft_head.topk(hidden, self.k)
        logits = self.base.output(hidden)  # [m, V]
        if self.k == 1:  # a chain: argmax is a cheaper scan than top-k
            return logits.argmax(-1, keepdim=True)
        return logits.topk(self.k, -1).indices

    def _draft(self, v: Verified) -> torch.Tensor:
        """The next draft [D, k] after what the call accepted (`Verified`); the placeholder
        when the model drafts nothing."""
        draft = self.draft_with(v, self.depth, self._head)  # [D, k] or None
        return placeholder_draft(self.depth, self.k) if draft is None else draft

    def _check_pos(self, start_pos, rows: int) -> None:
        torch._check(start_pos >= 0)
        torch._check(start_pos + rows <= self.max_seq_len)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """The main stream, autoregressively: tokens [1, T] at input_pos [1] -> logits of the
        last row [1, V] fp32. In Lossless mode this is the base model; in Shared mode the
        main rows use the fine-tuned adapters, as in step."""
        T = tokens.shape[1]
        start = input_pos[0].item()
        self._check_pos(start, T)
        feats, h = self._main(tokens, start, torch.arange(T) + start, None)
        self.prefill(feats, tokens[0], input_pos, start)
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
            mask = additive_mask(visible)
        feats, h = self._main(nodes[None], pos, self.node_depth + pos, mask)
        logits = self.base.output(h).float()  # [R, V]
        path, n, tokens = accept_tree(self.tree_children, self.tree_valid, self.depth, nodes, logits, temperature, uniforms, gumbel)
        if not self.tree.is_chain:
            rows = path + pos  # [D + 1]; slots past n get copies, overwritten next call
            self.base.compact_cache_(pos, rows)
        last_node = path.index_select(0, n - 1)  # [1]
        accepted = n[0].item()
        torch._check(accepted >= 1)
        torch._check(accepted <= self.depth + 1)
        nxt = pos + accepted
        v = Verified(feats, h, path, n, tokens, last, input_pos, pos, nxt, last_node, tokens.index_select(0, n - 1))
        return tokens, n, self._draft(v)


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
