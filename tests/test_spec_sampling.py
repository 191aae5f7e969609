"""Tree rejection sampling preserves the target distribution (statistical tests)."""

import math

import pytest
import torch

from edgespec.speculative.accept import accept_tree
from edgespec.speculative.tree import Tree


def _chi2_sf(x: float, k: int) -> float:
    """Survival function of the chi-square distribution (regularized upper gamma), k dof."""
    from scipy.stats import chi2  # noqa: F401  (scipy is optional; fall back below)

    return float(chi2.sf(x, k))


def chi2_pvalue(observed: torch.Tensor, expected: torch.Tensor) -> float:
    keep = expected > 0
    stat = float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    dof = int(keep.sum()) - 1
    try:
        return _chi2_sf(stat, dof)
    except ImportError:  # Wilson-Hilferty normal approximation
        z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
        return 0.5 * math.erfc(z / math.sqrt(2))


@pytest.mark.parametrize("draft", [[2, 0], [4, 1], [5, 5], [2, 2], [2, 1, 2]])
def test_one_step_output_distribution_equals_target(draft):
    """First emitted token vs the exact target distribution, N = 4000 draws, repeated
    sibling candidates included ([2, 2] with p(2) ~ 0.5 must not accept 2 with probability 1)."""
    gen = torch.Generator().manual_seed(42)
    V = 6
    tree = Tree((len(draft),))
    logits = torch.tensor([[1.0, 0.2, 2.0, -1.0, 0.5, 0.0]] + [[0.0] * V] * len(draft))
    toks = torch.tensor([0, *draft])
    children, valid = tree.children_table()
    n = 4000
    counts = torch.zeros(V)
    for _ in range(n):
        _, _, out = accept_tree(children, valid, 1, toks, logits, torch.tensor([1.0]), torch.rand(tree.size, len(draft), generator=gen), _gumbel(V, gen))
        counts[int(out[0])] += 1
    p = torch.softmax(logits[0], -1)
    assert chi2_pvalue(counts, p * n) > 1e-3


def test_two_step_joint_distribution_on_a_tiny_model(tiny_model):
    """Joint law of the first two sampled tokens: speculative sampler vs exact target law."""
    from edgespec.runtime.generate import generate
    from edgespec.speculative.common import NoDrafter
    from edgespec.speculative.step import EagerSpecMethods, SpecProgram

    prompt = [1, 2, 3]
    with torch.no_grad():
        tiny_model.output.weight.mul_(0.15)  # flatter distributions: many outcomes matter
        p1 = torch.softmax(tiny_model(torch.tensor([prompt]), torch.tensor([0]))[0], -1)
        top = p1.topk(4).indices.tolist()
        joint = {}
        for a in top:
            pa = torch.softmax(tiny_model(torch.tensor([prompt + [a]]), torch.tensor([0]))[0], -1)
            for b in pa.topk(4).indices.tolist():
                joint[(a, b)] = float(p1[a] * pa[b])

    fixed = torch.tensor([[top[0], top[1]], [top[1], top[2]]])  # a fixed, imperfect draft

    class FixedDraft(EagerSpecMethods):
        def spec_step(self, last, draft, pos, temperature, uniforms, gumbel):
            return super().spec_step(last, fixed, pos, temperature, uniforms, gumbel)

    m = FixedDraft(SpecProgram(NoDrafter(tiny_model), Tree((2, 2))))
    n = 2000
    counts = {k: 0 for k in joint}
    other = 0
    for s in range(n):
        # the prefill's sample, then the first token of a step that verifies the fixed draft
        out = generate(m.forward, prompt, max_new_tokens=2, max_seq_len=64, eos_ids=(), temperature=1.0, seed=s, spec=m).completion_ids
        key = tuple(out[:2])
        if key in counts:
            counts[key] += 1
        else:
            other += 1
    keys = list(joint)
    observed = torch.tensor([counts[k] for k in keys] + [other], dtype=torch.float64)
    expected = torch.tensor([joint[k] for k in keys] + [1 - sum(joint.values())], dtype=torch.float64) * n
    assert chi2_pvalue(observed, expected) > 1e-3


def _gumbel(n: int, gen: torch.Generator) -> torch.Tensor:
    return -torch.log(-torch.log(torch.rand(n, generator=gen).clamp(1e-20, 1 - 1e-7)))


def test_in_program_acceptance_samples_the_target_law():
    """`accept_tree` (the tensor code inside spec_step): law of (first, second) emitted tokens.

    Tree (2, 2): if the first token is one of the root's candidates it was accepted and the
    second token follows that child's distribution; otherwise the step stops after one token.
    """
    gen = torch.Generator().manual_seed(7)
    V = 5
    tree = Tree((2, 2))
    children, valid = tree.children_table()
    logits = torch.randn(tree.size, V, generator=gen)
    toks = torch.cat([torch.tensor([0]), torch.tensor([[1, 3], [2, 4]]).reshape(-1)[tree.fill_index()]])
    p = torch.softmax(logits, -1)
    expected = {}
    for a in range(V):
        child = next((c for c in tree.children[0] if int(toks[c]) == a), None)
        if child is None:
            expected[(a, None)] = float(p[0, a])
        else:
            for b in range(V):
                expected[(a, b)] = float(p[0, a] * p[child, b])
    n = 6000
    counts = dict.fromkeys(expected, 0)
    for _ in range(n):
        _, cnt, out = accept_tree(children, valid, 2, toks, logits, torch.tensor([1.0]), torch.rand(tree.size, 2, generator=gen), _gumbel(V, gen))
        key = (int(out[0]), int(out[1]) if int(cnt) >= 2 else None)
        counts[key] += 1
    keys = list(expected)
    observed = torch.tensor([counts[k] for k in keys], dtype=torch.float64)
    exp = torch.tensor([expected[k] for k in keys], dtype=torch.float64) * n
    assert chi2_pvalue(observed, exp) > 1e-3


def test_in_program_acceptance_at_temperature_zero_is_greedy():
    gen = torch.Generator().manual_seed(0)
    for branching in [(3, 2, 1), (1, 1, 1), (2, 2), (4,)]:
        tree = Tree(branching)
        children, valid = tree.children_table()
        for _ in range(100):
            V = 7
            logits = torch.randn(tree.size, V, generator=gen)
            cand = torch.stack([torch.randperm(V, generator=gen)[: tree.k_max] for _ in branching])
            toks = torch.cat([torch.randint(V, (1,), generator=gen), cand.reshape(-1)[tree.fill_index()]])
            for i in range(1, tree.size):  # make long accepted paths likely
                if torch.rand((), generator=gen) < 0.6:
                    logits[tree.parents[i], toks[i]] += 5
            ref_path, ref_tokens = _greedy_walk(tree, toks, logits)
            path, n, out = accept_tree(
                children, valid, len(branching), toks, logits, torch.tensor([0.0]), torch.full((tree.size, tree.k_max), 0.5), torch.zeros(V)
            )
            assert path[: int(n)].tolist() == ref_path
            assert out[: int(n)].tolist() == ref_tokens


def _greedy_walk(tree, toks, logits):
    """Greedy acceptance written as the plain walk: follow the child equal to the argmax."""
    node, path, out = 0, [0], []
    while True:
        best = int(logits[node].argmax())
        out.append(best)
        child = next((c for c in tree.children[node] if int(toks[c]) == best), None)
        if child is None:
            return path, out
        node = child
        path.append(child)


def test_the_program_runs_the_rule_its_temperature_asks_for(tmp_path):
    """accept_tree exported as a program: one torch.cond, whose greedy branch does no
    vocabulary-wide work beyond one argmax per row (no softmax, gather or scatter); the
    ExecuTorch runtime gives the eager tokens with either temperature, ties and repeated
    candidates included."""
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime
    from torch import nn

    tree = Tree((2, 2, 1))
    children, valid = tree.children_table()
    depth, R, k, V = 3, tree.size, tree.k_max, 11

    class Accept(nn.Module):
        def forward(self, toks, logits, temperature, uniforms, gumbel):
            return accept_tree(children, valid, depth, toks, logits, temperature, uniforms, gumbel)

    gen = torch.Generator().manual_seed(3)
    logits = torch.randint(0, 3, (R, V), generator=gen).float()  # many ties: the first maximum wins
    toks = torch.randint(V, (R,), generator=gen)
    toks[2] = toks[1]  # a repeated sibling
    args = (toks, logits, torch.tensor([0.0]), torch.rand(R, k, generator=gen), torch.zeros(V))
    ep = torch.export.export(Accept(), args, strict=False)
    conds = [n for n in ep.graph.nodes if n.target is torch.ops.higher_order.cond]
    assert len(conds) == 1
    greedy_graph = getattr(ep.graph_module, conds[0].args[1].target).graph
    ops = {str(n.target) for n in greedy_graph.nodes if n.op == "call_function"}
    assert "aten.argmax.default" in ops and not {o for o in ops if any(w in o for w in ("softmax", "gather", "scatter", "div"))}, ops
    path = tmp_path / "accept.pte"
    path.write_bytes(to_edge_transform_and_lower(ep).to_executorch().buffer)
    method = Runtime.get().load_program(path).load_method("forward")
    for temperature in (0.0, 1.0, 0.3):
        for _ in range(20):
            logits = torch.randint(0, 3, (R, V), generator=gen).float()
            gumbel = torch.zeros(V) if temperature == 0 else -torch.log(-torch.log(torch.rand(V, generator=gen)))
            call = (toks, logits, torch.tensor([temperature]), torch.rand(R, k, generator=gen), gumbel)
            want = accept_tree(children, valid, depth, *call)
            got = method.execute(list(call))
            assert all(torch.equal(w, g) for w, g in zip(want, got)), (temperature, want, got)
